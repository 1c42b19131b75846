#pragma once
// `pipegrid model NAME [--layers N --hidden N ... --micro-batch-size N
// --dtype fp32|fp16|bf16] [--output FILE] [--json]`: a model generator's
// profile (generators/model_generators.hpp): its layers, parameters and FLOPs
// printed, the profile written with --output; `--list` lists the models.
// The model flags are defined once (add_model_options) and shared with
// `simulate --model NAME`.

#include <CLI/CLI.hpp>

#include "generators/model_generators.hpp"

namespace pipegrid::cli {

/** Adds one flag per model option name (--layers, --hidden, ...: every
 *  option of every model, model_option_names()), each given value stored in
 *  spec.options; --dtype into spec.dtype unless `command` already has a
 *  --dtype; --micro-batch-size into spec.micro_batch_size when
 *  `with_micro_batch_size`. Which options the model takes is checked later,
 *  by resolve_model_spec. */
void add_model_options(CLI::App& command, ModelSpec& spec, bool with_micro_batch_size = true);

/** Adds the subcommand `model` to `app`; returns it so the caller can test
 *  whether it was chosen. */
CLI::App* add_model_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_model_command();

}  // namespace pipegrid::cli
