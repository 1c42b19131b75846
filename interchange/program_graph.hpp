#pragma once
// A simulated run as execution graphs (interchange/execution_graph.hpp): what
// each device did, with the dependencies the engine (sim/engine.hpp) gave
// it, so that sim/graph_engine.hpp replays it to the same timeline and
// Chakra tools (chakra_io) read it. docs/semantics.md, "Replaying an
// execution graph", states the mapping.

#include "api/simulation.hpp"
#include "core/plan.hpp"
#include "interchange/execution_graph.hpp"

namespace pipegrid::interchange {

/** The execution graphs of `run` (run_plan's result for `plan`).
 *
 *  Ranks: rank r is the platform's r-th host (run.platform.hosts, in the
 *  order the platform file declares them); its graph holds the work of the
 *  Program's device placed there (plan.partition.hosts[stage][replica] of
 *  the device's stages); hosts that run no device (tensor-parallel
 *  members, idle hosts) have empty graphs. Node ids count from 0 per rank.
 *
 *  Compute nodes: one per action, duration_s the simulated time (the
 *  timeline record's end - start, exact), name the Program's text form
 *  ("2F0@1"), num_ops the stage's layers' FLOPs when the profile gives them
 *  all (F and R: forward_flops; B: backward_input_flops +
 *  backward_weight_flops; I, W: each half), tensor_size the bytes the
 *  action sends (F: the stage's output activation; B and I: the gradient
 *  of its input); attributes pipegrid_stage, pipegrid_micro_batch,
 *  pipegrid_mini_batch, pipegrid_action (F, B, I, W, R, U) and
 *  pipegrid_stream; an overlapped F&B pair's nodes name each other in
 *  pipegrid_overlapped_with (the first takes the needs of both, the second
 *  follows it; their durations are the records' split of the pair's span).
 *  Optimizer steps are compute nodes "U(<action>)" with pipegrid_action U:
 *  on the action's stream after it, or, on a device that takes part in
 *  all-reduces, beside the streams (pipegrid_lane "collectives") after
 *  its collectives. Tensor-parallel collectives (charged as compute, or as
 *  flows) are inside the compute durations.
 *
 *  Dependencies: each node of a stream depends (ctrl) on the node before
 *  it; data inputs on the same host are data deps; between hosts a
 *  COMM_SEND on the producer's rank (data dep on the producer; comm_size
 *  the transfer's bytes; comm_tag numbering the messages of each (src, dst)
 *  pair in Program order; attribute pipegrid_action SEND_F or SEND_B;
 *  pipegrid_cut_through "1" from an asynchronous host) and a COMM_RECV on
 *  the consumer's (the consumer's data dep). Under blocking transfers the
 *  stream's next node depends on the send. Program::extra_dependencies on
 *  one host are ctrl deps; across hosts a zero-byte send/recv pair with
 *  attribute pipegrid_dependency "1" (delivered at once, as the engine
 *  does). All-reduces (reduce-scatters and all-gathers under the
 *  distributed optimizer) are COMM_COLL_NODEs of each participant, in the
 *  order the engine runs them (a chain beside the streams), depending on
 *  the participant's ready backward, with comm_size the bytes reduced and
 *  pg_name a process group whose ranks are the ring in order; the actions
 *  an all-reduce releases depend on the participant's last node of it (the
 *  step, with overlapped parameter gathers).
 *
 *  A tied word embedding's all-reduces are collective nodes of a two-rank
 *  group (first stage's device, last stage's) where the engine runs them.
 *
 *  Throws InputError for what the graphs cannot hold: per-layer (wait-free)
 *  or bucketed gradient synchronisation (their collectives start inside a
 *  backward), or a timeline record missing for an action. */
ExecutionTraceSet trace_set_of_run(const Plan& plan, const api::RunResult& run);

}  // namespace pipegrid::interchange
