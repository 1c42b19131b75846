#pragma once
// Limits on what inputs may state (docs/formats.md, "Limits"). They keep
// every derived quantity finite (a time x a count, bytes x weight versions)
// and every allocation proportional to a bounded count. A value beyond a
// limit is an InputError naming the file or flag, the limit and the value.

namespace pipegrid::limits {

/// Any size in bytes read from a file (a layer's output, activation or
/// parameter bytes, a profile's input bytes): at most 1e18 (about 888 PiB).
inline constexpr double kMaxBytes = 1e18;
/// Any duration of one layer or one micro-batch read from a file (forward_s,
/// backward_s, graph.txt milliseconds / 1000): at most 1e9 s (31 years).
inline constexpr double kMaxSeconds = 1e9;
/// Floating-point operations of one layer and micro-batch (a profile's
/// forward_flops, backward_input_flops, backward_weight_flops): at most 1e24.
inline constexpr double kMaxFlops = 1e24;
/// Any other number read from a file (a timeline's instants and bytes, a
/// plan's prediction cost): finite and at most this in magnitude.
inline constexpr double kMaxMagnitude = 1e300;
/// A plan's prediction cost, seconds per parameter byte.
inline constexpr double kMaxPredictionCostSPerByte = 1.0;

/// Pipeline stages of a schedule.
inline constexpr int kMaxStages = 1024;
/// Devices of a schedule: the stages' replicas summed (as many as the
/// largest platform holds, kMaxPlatformHosts).
inline constexpr int kMaxDevices = 16384;
/// Work items of a schedule: stages x micro-batches x mini-batches (each
/// item is a forward and a backward, plus a recompute with --recompute). At
/// this limit a simulation takes about 10 s and 650 MB (analytic network).
inline constexpr long long kMaxWorkItems = 250000;
/// Work items of a layout's d pipelines together: work items x d (every
/// replica is simulated). The 16,384-GPU job of docs/performance.md (32
/// stages x 64 micro-batches x d 128 = 262,144) is within it.
inline constexpr long long kMaxReplicatedWorkItems = 1048576;
/// Micro-batches per mini-batch, and mini-batches, each.
inline constexpr int kMaxMicroBatches = 250000;
inline constexpr int kMaxMiniBatches = 250000;
/// Devices x mini-batches (the per-device bookkeeping of a schedule and its
/// all-reduces grow with it).
inline constexpr long long kMaxDeviceMiniBatches = 1000000;
/// The PipeDream family's --pipeline-depth and pipedream-2bw's
/// --update-interval.
inline constexpr int kMaxPipelineDepth = 1000000;
inline constexpr int kMaxUpdateInterval = 1000000;

/// Machines of the pipedream partitioner (the product of --machines).
inline constexpr int kMaxMachines = 4096;
/// Cells of the pipedream partitioner's tables (rows x states x machines
/// summed over the levels; a cell is 24 bytes).
inline constexpr double kMaxPipeDreamCells = 32e6;
/// Layers of a model graph given to PipeDream's antichain construction, and
/// the antichain states it may build.
inline constexpr int kMaxAntichainLayers = 4096;
inline constexpr int kMaxAntichainStates = 8192;

}  // namespace pipegrid::limits
