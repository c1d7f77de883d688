// The CPU backend's thread pool (cpu_parallel.h has the design).
//
// Memory order: the caller writes the job (m_call, m_ctx, each thread's run, m_done = 0) and then
// releases it with the store of the new generation into m_state; a thread that sees that
// generation (acquire) sees the job, and claims a part with an acquire compare-exchange on a
// run's counter, which succeeds only while the counter holds this generation. The caller
// publishes the next job only after every part of this one is done (m_done, release / acquire)
// and it has closed every run (its counter set to "no part left", kClosed), so a late thread can
// never run a part of a finished job or see a half-written one: a thread still holding a
// counter value of this job tests it against the next job's run end (written before that job is
// published) and could pass that test, but its compare-exchange then fails against the closed
// counter, and a fresh load shows no part left (or another generation). Without the closing
// store it could claim a phantom part of this generation with the next job's (or a dead)
// context: a crash seen under load in the signal tests (cli.output_paths).
#include "cpu_parallel.h"

#include <string>
#include <system_error>

#include "ampctl/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ampctl::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

constexpr uint64_t gen_of(uint64_t state) {
  return state >> 32;
}
constexpr int64_t next_of(uint64_t state) {
  return static_cast<int64_t>(state & 0xffffffffu);
}
// The "next part" of a finished job: above any part count.
constexpr uint64_t kClosed = 0xffffffffu;

// Spins before sleeping: a training step issues its passes microseconds apart, so a worker that
// has just finished one usually sees the next while spinning (a futex wake costs more).
constexpr int kSpinsBeforeSleep = 4000;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int workers = std::max(threads, 1) - 1;
  m_runs = std::make_unique<Run[]>(static_cast<size_t>(workers) + 1);
  m_workers.reserve(static_cast<size_t>(workers));
  try {
    for (int t = 1; t <= workers; ++t) m_workers.emplace_back([this, t] { worker_main(t); });
  } catch (const std::system_error& e) {
    // No room for another thread (a memory limit, a process limit): the started ones are
    // stopped and joined (a joinable std::thread destroyed would end the process).
    const int started = static_cast<int>(m_workers.size());
    stop();
    throw Error{ErrorKind::runtime,
                "cannot start the CPU backend's thread " + std::to_string(started + 1) + " of " +
                    std::to_string(workers) + ": " + e.what(),
                "the process's memory or thread limit is reached (ulimit -v, ulimit -u); raise "
                "it or set OPENBLAS_NUM_THREADS to fewer threads"};
  }
}

ThreadPool::~ThreadPool() {
  stop();
}

void ThreadPool::stop() {
  m_stop.store(true, std::memory_order_seq_cst);
  // A new generation with no parts wakes every sleeper, which then sees m_stop.
  const uint64_t gen = gen_of(m_state.load()) + 1;
  for (int t = 0; t < threads(); ++t) {
    m_runs[t].end.store(0, std::memory_order_relaxed);
    m_runs[t].next.store(gen << 32, std::memory_order_relaxed);
  }
  publish(gen);
  for (std::thread& w : m_workers) w.join();
}

void ThreadPool::publish(uint64_t gen) {
  m_state.store(gen << 32, std::memory_order_seq_cst);
  if (m_sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(m_mutex); }
    m_wake.notify_all();
  }
}

void ThreadPool::dispatch(int64_t parts, Trampoline call, void* ctx) {
  m_call.store(call, std::memory_order_relaxed);
  m_ctx.store(ctx, std::memory_order_relaxed);
  m_done.store(0, std::memory_order_relaxed);
  const uint64_t gen = gen_of(m_state.load(std::memory_order_relaxed)) + 1;
  const int n = threads();
  for (int t = 0; t < n; ++t) {
    m_runs[t].end.store(parts * (t + 1) / n, std::memory_order_relaxed);
    m_runs[t].next.store((gen << 32) | static_cast<uint64_t>(parts * t / n),
                         std::memory_order_relaxed);
  }
  publish(gen);
  work(gen, 0);
  // Parts claimed by other threads may still be running: wait for them, yielding the core in
  // case the thread running one is waiting for it.
  for (int spins = 0; m_done.load(std::memory_order_acquire) < parts; ++spins) {
    if (spins < kSpinsBeforeSleep) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  // Close the job before the next one's fields are written (the header's memory-order note).
  for (int t = 0; t < n; ++t) {
    m_runs[t].next.store((gen << 32) | kClosed, std::memory_order_release);
  }
}

void ThreadPool::work(uint64_t gen, int thread) {
  const int n = threads();
  for (int i = 0; i < n; ++i) work_run(gen, (thread + i) % n, thread);
}

void ThreadPool::work_run(uint64_t gen, int owner, int thread) {
  Run& run = m_runs[owner];
  uint64_t s = run.next.load(std::memory_order_acquire);
  while (gen_of(s) == gen && next_of(s) < run.end.load(std::memory_order_relaxed)) {
    if (run.next.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      // The claim succeeded under generation `gen`, whose job stays in place until this part
      // is counted done.
      m_call.load(std::memory_order_relaxed)(m_ctx.load(std::memory_order_relaxed), next_of(s),
                                             thread);
      m_done.fetch_add(1, std::memory_order_release);
      s = run.next.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker_main(int thread) {
  // Generation 0 is the pool's state before its constructor returns: nothing can have been
  // published yet, whenever this thread starts.
  uint64_t seen = 0;
  for (;;) {
    uint64_t s = m_state.load(std::memory_order_acquire);
    for (int spins = 0; gen_of(s) == seen && spins < kSpinsBeforeSleep; ++spins) {
      cpu_relax();
      s = m_state.load(std::memory_order_acquire);
    }
    if (gen_of(s) == seen) {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_sleepers.fetch_add(1, std::memory_order_seq_cst);
      m_wake.wait(lock, [&] { return gen_of(m_state.load(std::memory_order_seq_cst)) != seen; });
      m_sleepers.fetch_sub(1, std::memory_order_relaxed);
      s = m_state.load(std::memory_order_acquire);
    }
    if (m_stop.load(std::memory_order_acquire)) return;
    seen = gen_of(s);
    work(seen, thread);
  }
}

}  // namespace ampctl::cpu
