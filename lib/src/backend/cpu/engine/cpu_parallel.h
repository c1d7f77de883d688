// The CPU backend's threads: a small persistent pool of the backend's thread count
// (CpuBackend(threads), which a sweep divides among its jobs), used by the GEMM kernels and the
// big elementwise passes.
//
// A job is cut into parts with fixed boundaries; the calling thread and the workers claim parts
// one at a time, and the call returns when every part is done. Thread t owns the t-th
// contiguous run of parts (parts * t / threads up to parts * (t + 1) / threads, one counter per
// thread tagged with the job's generation) and claims those first, in order, so consecutive
// passes over the same rows keep them on the core that wrote them (in its L2); a thread whose
// own run is used up takes the others' remaining parts, in order from the next thread's. There is
// no barrier that waits for every thread to show up: on a shared, oversubscribed machine a
// descheduled worker simply claims nothing and the caller does the work, so a pass degrades to one
// thread's speed instead of stalling for the worker's time slice (which is what a fork/join team
// such as OpenMP's does, once per pass). Idle workers spin briefly, then sleep on a condition
// variable.
//
// Invariant: which thread runs a part never changes its arithmetic, and the parts' boundaries
// depend only on the problem, never on the thread count or on timing, so results never depend on
// either. Reductions are not split (they keep their sequential order). No allocation per job.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ampctl::cpu {

class ThreadPool {
 public:
  // threads - 1 workers; the caller is thread 0. A thread that cannot start is Error{runtime}.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(m_workers.size()) + 1; }

  // Calls fn(part, thread) for every part in [0, parts), thread in [0, threads()) naming the
  // thread that runs it (for per-thread scratch buffers); returns when all are done.
  template <typename F>
  void run(int64_t parts, F&& fn) {
    if (parts <= 0) return;
    if (m_workers.empty() || parts == 1) {
      for (int64_t p = 0; p < parts; ++p) fn(p, 0);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    dispatch(
        parts, [](void* ctx, int64_t p, int t) { (*static_cast<Fn*>(ctx))(p, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  void stop();  // wakes and joins the workers
  using Trampoline = void (*)(void* ctx, int64_t part, int thread);
  void dispatch(int64_t parts, Trampoline call, void* ctx);
  // Claims and runs parts of the current job (generation `gen`) until none is left: its own
  // run first, then the others'.
  void work(uint64_t gen, int thread);
  // Claims and runs parts from thread `owner`'s run until it is used up.
  void work_run(uint64_t gen, int owner, int thread);
  void worker_main(int thread);
  // Publishes generation `gen` (a new job, or the stop signal) and wakes sleeping workers.
  void publish(uint64_t gen);

  // High 32 bits: the generation of the current job (low 32 bits: 0).
  std::atomic<uint64_t> m_state{0};
  // Per thread, its run of the current job: high 32 bits the generation, low 32 bits the next
  // unclaimed part of the run, which ends before `end`. On their own cache lines.
  struct alignas(64) Run {
    std::atomic<uint64_t> next{0};
    std::atomic<int64_t> end{0};
  };
  std::unique_ptr<Run[]> m_runs;
  std::atomic<int64_t> m_done{0};
  std::atomic<bool> m_stop{false};
  // Sleeping workers: they register in m_sleepers, then wait on m_wake under m_mutex; a publisher
  // that sees a registered sleeper takes the mutex before notifying, so no wake-up is lost.
  std::atomic<int> m_sleepers{0};
  std::mutex m_mutex;
  std::condition_variable m_wake;
  // The current job; written before m_state publishes its generation.
  std::atomic<Trampoline> m_call{nullptr};
  std::atomic<void*> m_ctx{nullptr};
  std::vector<std::thread> m_workers;
};

// Below this many elements a memory-bound pass runs on one thread: waking a second one costs
// more than it saves. A worker that has just finished a pass is still spinning (kSpinsBeforeSleep
// in cpu_parallel.cpp), so handing it a part costs a microsecond or two, about what a pass over
// 16 Ki elements takes; a GPT step's row passes (768 rows x 128: LayerNorm, the residual adds,
// the casts) are then split too instead of running on one thread.
inline constexpr size_t kParallelGrain = size_t{1} << 14;

// Calls fn(begin, end) over [0, n) in contiguous ranges whose boundaries are multiples of
// `align` elements (vector loops stay on their blocks; 16-bit stores never share a cache line
// between threads). The ranges depend only on n and the pool's size.
template <typename F>
void parallel_for(ThreadPool& pool, size_t n, F&& fn, size_t align = 64) {
  if (n == 0) return;
  const size_t chunks = (n + align - 1) / align;
  // A few parts per thread, so a late or descheduled thread leaves its share to the others.
  size_t parts = std::min<size_t>(4 * static_cast<size_t>(pool.threads()),
                                  std::max<size_t>(1, n / kParallelGrain));
  parts = std::min(parts, chunks);
  if (parts <= 1) {
    fn(size_t{0}, n);
    return;
  }
  pool.run(static_cast<int64_t>(parts), [&](int64_t p, int) {
    const size_t lo = std::min(n, chunks * static_cast<size_t>(p) / parts * align);
    const size_t hi = std::min(n, chunks * static_cast<size_t>(p + 1) / parts * align);
    if (lo < hi) fn(lo, hi);
  });
}

// Runs fn(begin, end, thread) over [0, rows) in a few contiguous ranges per thread when the work
// (rows * cost element operations) is worth waking threads for. Range boundaries depend only on
// the problem and the pool's size; callers keep every row's arithmetic independent of them.
template <typename F>
void for_rows(ThreadPool& pool, int64_t rows, int64_t cost, F&& fn) {
  if (rows <= 0) return;
  const double work = static_cast<double>(rows) * static_cast<double>(std::max<int64_t>(cost, 1));
  int64_t parts = std::min<int64_t>(
      4 * pool.threads(), static_cast<int64_t>(work / static_cast<double>(kParallelGrain)));
  parts = std::clamp<int64_t>(parts, 1, rows);
  if (parts == 1) {
    fn(int64_t{0}, rows, 0);
    return;
  }
  pool.run(parts, [&](int64_t p, int thread) {
    const int64_t lo = rows * p / parts, hi = rows * (p + 1) / parts;
    if (lo < hi) fn(lo, hi, thread);
  });
}

}  // namespace ampctl::cpu
