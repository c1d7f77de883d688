// Rank agreement on a run's inputs (docs/distributed.md, "Faults and signals"): before the first
// collective of the training itself, the ranks of a data-parallel job check that they were
// started with the same resolved configuration and read the same data. Ranks that differ would
// otherwise hang (one rank runs more steps, or evaluates when the other does not) or abort inside
// MPI with a truncated message (a vocabulary of 93 against 94 symbols gives arenas of other
// sizes).
//
// Each rank describes its inputs as a list of items "KEY\tVALUE": every key of the resolved
// configuration (config::to_json, flattened to dotted paths) and, for the data, the sizes and a
// CRC-32 of the contents of each split (and the vocabulary). Rank 0's list goes to every rank
// (one host broadcast), each rank compares it with its own, and one host all-reduce finds the
// lowest rank that differs. That rank names itself, the first differing key and both values;
// every rank then throws RanksDisagree (exit 2, agreed: no rank aborts the job). One rank: no-op.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/data/dataset.h"
#include "ampctl/data/lm.h"

namespace ampctl::dist {
class Communicator;
}

namespace ampctl::train {

// Every rank throws it together; only `reporter` (the lowest differing rank) prints its message.
class RanksDisagree : public Error {
 public:
  RanksDisagree(std::string message, std::string hint, bool reporter)
      : Error(ErrorKind::config, std::move(message), std::move(hint)), m_reporter(reporter) {}
  bool reporter() const { return m_reporter; }

 private:
  bool m_reporter;
};

using InputItems = std::vector<std::pair<std::string, std::string>>;

// The resolved configuration's keys and values ("model.n_head" -> "4"), in key order.
InputItems config_items(const config::RunConfig& config);
// What identifies loaded data: sizes and CRC-32s of each split's contents and the vocabulary.
InputItems data_items(const data::DataSplit& data);
InputItems data_items(const data::LmData& data);

// Throws RanksDisagree on every rank when some rank's `items` differ from rank 0's; `what`
// names them in the message ("configuration", "data").
void agree_on_inputs(dist::Communicator& comm, const InputItems& items, const std::string& what);

}  // namespace ampctl::train
