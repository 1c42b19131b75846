#pragma once
// PyTorch `torch.distributed.pipelining` schedule CSVs in and out
// (docs/formats.md, "PyTorch pipelining CSV"). Pure: no SimGrid, no LibTorch.
//
// The file: one row per rank (row r = rank r), one column per step, a cell
// holds one action in PyTorch's text form or nothing (an idle step). Stage
// ids are global. Both PyTorch formats read: "compute_only" (F, I, B, W,
// `(0F7;7B3)OVERLAP_F_B`) and "compute_comms" (also SEND_F, RECV_F, SEND_B,
// RECV_B, UNSHARD, RESHARD, REDUCE_GRAD), in the current grammar (B = whole
// backward, I and W its halves) or the older one (before PyTorch PR #138886:
// B = the input-gradient half, BW = the whole backward).

#include <string>
#include <vector>

#include "core/program.hpp"

namespace pipegrid {

struct TorchCsvImport {
  Program program;
  /// What the import changed or left out, one sentence each, in a fixed
  /// order (e.g. "older grammar: B read as the input-gradient half (I) for
  /// 32 actions ..."); empty when the cells map one to one onto actions.
  std::vector<std::string> notes;
};

/** Reads a PyTorch pipelining schedule CSV ("\n" or "\r\n" line ends).
 *  Returns the Program: num_stages = the largest stage + 1 (every stage
 *  0..S-1 appears), micro_batches = the largest micro-batch + 1, one
 *  mini-batch; one device per row (rank), holding replica 0 of the stages
 *  its cells name (ascending), one stream with its compute actions in
 *  column order; an overlapped cell gives two actions and an `overlapped`
 *  position. Empty cells are dropped. In a file without I actions, a B
 *  followed later on its row by the W of its stage and micro-batch is read
 *  as I (the older grammar); BW is a whole backward (B). Communication is
 *  checked, then dropped: every hand-off between stages on different ranks
 *  has exactly one SEND on the producer's row after the producing action and
 *  one RECV on the consumer's row before the consuming action, and there is
 *  no other SEND or RECV. UNSHARD and RESHARD are ignored, REDUCE_GRAD
 *  dropped (the Program has no replicas). Checks as PyTorch's
 *  `_validate_schedule`: each stage on one rank; per stage and micro-batch
 *  one F and either one B or one I and one W, a B or I after its F and a W
 *  after its I on the row. Does not check for deadlocks (validate_program
 *  does). Throws InputError naming `origin`, the row (rank) and the column
 *  (step, from 1) of the bad cell, what was expected and what was found. The
 *  legacy fused SEND_F_RECV_B / SEND_B_RECV_F are rejected. */
TorchCsvImport parse_torch_csv(const std::string& text, const std::string& origin);

/** Writes `program` as a PyTorch pipelining CSV in the current grammar: one
 *  row per device in order, its stream's actions as cells (`2F0`, `2I0`,
 *  `2W0`, `2B0`; an overlapped pair as `(0F7;7B3)OVERLAP_F_B`), no empty
 *  cells, no communication, each row ended by "\n". parse_torch_csv reads
 *  it back as the same Program when the device's stages are listed in
 *  ascending order (the CSV does not store their order). Throws InputError
 *  naming the reason when the Program cannot be written in the format:
 *  several mini-batches, replicas (replica > 0 or a stage on two devices),
 *  R actions, several streams per device, extra dependencies, all-reduces,
 *  an action of a stage its device does not hold, a device without actions,
 *  an overlapped pair that is not one F and one B or I. */
std::string program_to_torch_csv(const Program& program);

/** Reads a Program file in `format` (text: pipegrid's text form; torch-csv:
 *  PyTorch's pipelining CSV, whose reading notes go to `notes` when given)
 *  and validates it (validate_program); InputError naming the file (a
 *  folder included), and for a format other than those two. */
Program read_program_file(const std::string& path, const std::string& format, std::vector<std::string>* notes = nullptr);

}  // namespace pipegrid
