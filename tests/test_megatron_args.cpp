// Megatron-LM launch arguments (layout/megatron_args.hpp, issue 27): three
// launches written for these tests (tests/data/megatron/), the shell
// syntax, and each rule of docs/megatron.md with its message.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/io.hpp"
#include "generators/model_generators.hpp"
#include "core/profile.hpp"
#include "expect_input_error.hpp"
#include "layout/megatron_args.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

const std::string kData = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/megatron/";

/// The smallest launch the reader accepts, with `more` appended.
std::string minimal(const std::string& more = "") {
  return "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 2 --vocab-size 1000 " +
         more;
}

MegatronLaunch read(const std::string& text) { return read_megatron_args(text, "--megatron-args"); }

std::string error_of(const std::string& text) {
  return input_error_of([&] { read(text); });
}

bool has_note(const MegatronLaunch& launch, const std::string& part) {
  return std::any_of(launch.notes.begin(), launch.notes.end(),
                     [&](const std::string& note) { return note.find(part) != std::string::npos; });
}

long long option(const MegatronLaunch& launch, const std::string& name) { return launch.model.options.at(name); }

TEST(MegatronArgs, Gpt3LaunchScript) {
  const std::string file = kData + "gpt3_175b.sh";
  const MegatronLaunch launch = read_megatron_args(read_text_file(file), file);
  EXPECT_EQ(launch.model.name, "gpt");
  EXPECT_EQ(launch.model.dtype, "fp16");
  EXPECT_EQ(launch.model.micro_batch_size, 1);
  EXPECT_EQ(option(launch, "layers"), 96);
  EXPECT_EQ(option(launch, "hidden"), 12288);
  EXPECT_EQ(option(launch, "heads"), 96);
  EXPECT_EQ(option(launch, "query_groups"), 96);
  EXPECT_EQ(option(launch, "ffn"), 4 * 12288);
  EXPECT_EQ(option(launch, "sequence"), 2048);
  EXPECT_EQ(option(launch, "positions"), 2048);
  EXPECT_EQ(option(launch, "swiglu"), 0);
  EXPECT_EQ(option(launch, "rotary"), 0);
  EXPECT_EQ(option(launch, "linear_bias"), 1);
  EXPECT_EQ(option(launch, "rmsnorm"), 0);
  EXPECT_EQ(option(launch, "tied_embeddings"), 1);  // Megatron ties them unless told
  // GPT2BPETokenizer (pretrain_gpt.py's default) with GPT-2's 50257 tokens,
  // padded to a multiple of 128 x 8.
  EXPECT_EQ(option(launch, "vocabulary"), 51200);
  EXPECT_TRUE(has_note(launch, "vocabulary: 50257, GPT-2's vocabulary"));
  EXPECT_TRUE(has_note(launch, "padded to 51200 (a multiple of --make-vocab-size-divisible-by 128 x tensor parallel 8)"));
  EXPECT_EQ(launch.tensor_parallel, 8);
  EXPECT_EQ(launch.pipeline_parallel, 16);
  EXPECT_EQ(launch.virtual_stages, 1);
  EXPECT_EQ(launch.schedule, "1f1b-sno");
  EXPECT_EQ(launch.micro_batch_size, 1);
  EXPECT_EQ(launch.global_batch_size, 1536);
  EXPECT_FALSE(launch.recompute.full);
  EXPECT_TRUE(launch.use_flash_attn);  // auto, Transformer Engine, fp16
  EXPECT_EQ(option(launch, "flash_attention"), 1);
  EXPECT_EQ(launch.optimizer, "adam");
  EXPECT_FALSE(launch.fp32_gradients);
  EXPECT_TRUE(has_note(launch, "launcher, not read: torchrun --nproc_per_node 8 --nnodes 16 --node_rank 0 --master_addr "
                               "10.0.0.1 --master_port 6000 pretrain_gpt.py"));
  EXPECT_TRUE(has_note(launch, "not read: the 2 shell words before the command (from line 7)"));
  EXPECT_TRUE(has_note(launch, "--rampup-batch-size 16 16 5859375: batch-size ramp-up"));
  const std::vector<std::string> ignored = {"--train-samples 146484375",
                                            "--lr-decay-samples 126953125",
                                            "--weight-decay 0.1",
                                            "--adam-beta1 0.9",
                                            "--adam-beta2 0.95",
                                            "--init-method-std 0.006",
                                            "--clip-grad 1.0",
                                            "--lr 6.0e-5",
                                            "--lr-decay-style cosine",
                                            "--min-lr 6.0e-6",
                                            "--lr-warmup-fraction .001",
                                            "--data-path /data/gpt3/pile_text_document",
                                            "--vocab-file /data/gpt3/gpt2-vocab.json",
                                            "--merge-file /data/gpt3/gpt2-merges.txt",
                                            "--split 949,50,1",
                                            "--log-interval 100",
                                            "--save-interval 10000",
                                            "--eval-interval 1000",
                                            "--save /checkpoints/gpt3-175b",
                                            "--load /checkpoints/gpt3-175b",
                                            "--eval-iters 10",
                                            "--tensorboard-dir /logs/gpt3-175b"};
  EXPECT_EQ(launch.ignored, ignored);
  // GPT-3 175B: 96 x (12 h^2 + 13 h) + (51200 + 2048) h + 2 h, the head tied.
  const double h = 12288;
  EXPECT_EQ(profile_parameter_count(generate_model_profile(launch.model)),
            96 * (12 * h * h + 13 * h) + (51200 + 2048) * h + 2 * h);
}

TEST(MegatronArgs, LlamaLaunchScript) {
  const std::string file = kData + "llama3_8b.sh";
  const MegatronLaunch launch = read_megatron_args(read_text_file(file), file);
  EXPECT_EQ(launch.model.dtype, "bf16");
  EXPECT_EQ(option(launch, "layers"), 32);
  EXPECT_EQ(option(launch, "ffn"), 14336);
  EXPECT_EQ(option(launch, "query_groups"), 8);
  EXPECT_EQ(option(launch, "swiglu"), 1);
  EXPECT_EQ(option(launch, "rotary"), 1);
  EXPECT_EQ(launch.model.options.count("positions"), 0u);
  EXPECT_EQ(option(launch, "rmsnorm"), 1);
  EXPECT_EQ(option(launch, "linear_bias"), 0);
  EXPECT_EQ(option(launch, "tied_embeddings"), 0);
  // NullTokenizer: 128256 + the end-of-document token, padded to 128 x 2.
  EXPECT_EQ(option(launch, "vocabulary"), 128512);
  EXPECT_TRUE(has_note(launch, "--vocab-size 128256 + 1 (the NullTokenizer's end-of-document token) padded to 128512"));
  EXPECT_EQ(launch.tensor_parallel, 2);
  EXPECT_EQ(launch.pipeline_parallel, 4);
  EXPECT_EQ(launch.virtual_stages, 4);  // 32 / (4 x 2)
  EXPECT_EQ(launch.schedule, "interleaved-1f1b");
  EXPECT_TRUE(launch.recompute.full);
  EXPECT_EQ(launch.recompute.method, "uniform");
  EXPECT_EQ(launch.recompute.num_layers, 1);
  EXPECT_TRUE(launch.use_flash_attn);
  EXPECT_TRUE(launch.fp32_gradients);  // bf16's default: modelled (--gradient-dtype fp32), no note
  EXPECT_FALSE(has_note(launch, "gradients:"));
  EXPECT_TRUE(has_note(launch, "--attention-dropout 0.0: pipegrid's blocks keep their dropout masks"));
  EXPECT_FALSE(has_note(launch, "--rotary-percent"));  // 1.0: every channel, as pipegrid rotates
  EXPECT_TRUE(has_note(read(minimal("--position-embedding-type rope --rotary-percent 0.5")),
                       "--rotary-percent 0.5: pipegrid rotates every channel"));
  EXPECT_TRUE(has_note(launch, "launcher, not read: CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node=8 --nnodes=1 "
                               "pretrain_gpt.py"));
  EXPECT_TRUE(has_note(launch, "not read: what follows the arguments (line 31): 2>&1 | tee train.log"));
  // As given: the = form kept, quotes removed.
  const auto& ignored = launch.ignored;
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "--save-interval=1000"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "--split 99,1,0"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "--save /checkpoints/llama3 8b"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "--use-mcore-models"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "--rotary-base 500000"), ignored.end());
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "--swiglu"), ignored.end());
  EXPECT_NO_THROW(generate_model_profile(launch.model));
}

TEST(MegatronArgs, ArgumentsOnlyFileWithUnevenStages) {
  const std::string file = kData + "uneven.args";
  const MegatronLaunch launch = read_megatron_args(read_text_file(file), file);
  EXPECT_EQ(launch.pipeline_parallel, 4);
  EXPECT_EQ(launch.decoder_first_pipeline_num_layers, 2);
  EXPECT_EQ(launch.decoder_last_pipeline_num_layers, 2);
  EXPECT_EQ(launch.virtual_stages, 2);
  EXPECT_EQ(launch.schedule, "interleaved-1f1b");
  EXPECT_EQ(option(launch, "vocabulary"), 50304);  // 50257 to a multiple of 64
  EXPECT_FALSE(launch.fp32_gradients);             // --grad-reduce-in-bf16
  EXPECT_EQ(launch.optimizer, "sgd");              // momentum 0
  EXPECT_TRUE(launch.use_flash_attn);  // auto, Transformer Engine, bf16
  EXPECT_TRUE(launch.ignored.empty());
  EXPECT_FALSE(has_note(launch, "launcher"));
}

TEST(MegatronArgs, ShellSyntax) {
  // = form, quotes, a continuation, a comment, a tab.
  const MegatronLaunch launch = read("--num-layers=6 --hidden-size '256' \\\n --num-attention-heads \"8\"\t# heads\n"
                                     "--seq-length 128 --max-position-embeddings=128 --micro-batch-size 2 --vocab-size 1000");
  EXPECT_EQ(option(launch, "layers"), 6);
  EXPECT_EQ(option(launch, "heads"), 8);
  EXPECT_EQ(option(launch, "positions"), 128);
  // Arguments only: newlines are spaces; a shell operator ends them.
  EXPECT_TRUE(has_note(read(minimal() + "> log.txt"), "not read: what follows the arguments: > log.txt"));
  // With a script: its arguments end with its line.
  const MegatronLaunch script = read("python pretrain_gpt.py " + minimal() + "\necho done");
  EXPECT_TRUE(has_note(script, "launcher, not read: python pretrain_gpt.py"));
  EXPECT_TRUE(has_note(script, "not read: what follows the arguments (line 2): echo done"));
  // The last .py word starts the arguments.
  EXPECT_EQ(option(read("torchrun run.py --foo pretrain_gpt.py " + minimal()), "layers"), 4);
  // A negative number is a value (argparse), an escaped character a letter.
  EXPECT_EQ(read(minimal("--inference-batch-times-seqlen-threshold -1 --data-path a\\ b c")).ignored,
            (std::vector<std::string>{"--inference-batch-times-seqlen-threshold -1", "--data-path a b c"}));
}

TEST(MegatronArgs, UnexpandedShellVariables) {
  EXPECT_EQ(error_of(minimal("--save $CHECKPOINT_PATH")),
            "--megatron-args: $CHECKPOINT_PATH: an unexpanded shell variable; expand it before passing the arguments");
  EXPECT_EQ(error_of("torchrun --nproc_per_node ${GPUS_PER_NODE} pretrain_gpt.py " + minimal()),
            "--megatron-args: ${GPUS_PER_NODE}: an unexpanded shell variable (GPUS_PER_NODE); expand it before passing the "
            "arguments");
  EXPECT_CONTAINS(error_of(minimal("--save \"/ckpt/$RUN\"")), "$RUN: an unexpanded shell variable");
  EXPECT_CONTAINS(error_of(minimal("--save $(pwd)")), "$(...): a command substitution");
  EXPECT_CONTAINS(error_of(minimal("--save `pwd`")), "a command substitution");
  EXPECT_CONTAINS(error_of(minimal("--data-path $1")), "$1: an unexpanded shell parameter");
  // Single quotes keep a '$' as it is, and a lone '$' is a letter.
  EXPECT_EQ(read(minimal("--wandb-exp-name 'cost$X' --wandb-project a$")).ignored,
            (std::vector<std::string>{"--wandb-exp-name cost$X", "--wandb-project a$"}));
  // The line, where the text has several.
  EXPECT_EQ(input_error_of([] { read_megatron_args("pretrain_gpt.py \\\n  --num-layers $L", "launch.sh"); }),
            "launch.sh:2: $L: an unexpanded shell variable; expand it before passing the arguments");
  EXPECT_EQ(input_error_of([] { read_megatron_args("--save 'never closed\n", "launch.sh"); }),
            "launch.sh:1: a single quote opened here is never closed");
}

TEST(MegatronArgs, UnknownArgumentsAndValues) {
  EXPECT_EQ(error_of(minimal("--num-layer 4")),
            "--megatron-args: --num-layer: not an argument of Megatron-LM core_v0.14.0 (did you mean '--num-layers'?)");
  EXPECT_EQ(error_of(minimal("--tensor-parallel-size 2")),
            "--megatron-args: --tensor-parallel-size: not an argument of Megatron-LM core_v0.14.0");
  EXPECT_EQ(error_of(minimal("--swiglu=true")), "--megatron-args: --swiglu: a switch takes no value, found '=true'");
  EXPECT_EQ(error_of(minimal("--swiglu true")),
            "--megatron-args: 'true': expected an argument (--name), found a value; --swiglu is a switch and takes none");
  EXPECT_EQ(error_of("pretrain_gpt.py 4 " + minimal()),
            "--megatron-args: '4': expected an argument (--name), found a word that is not one (Megatron-LM takes no "
            "positional arguments)");
  EXPECT_EQ(error_of(minimal("--global-batch-size")),
            "--megatron-args: --global-batch-size: expected a value, found the end of the arguments");
  EXPECT_EQ(error_of("--num-layers --hidden-size 256"),
            "--megatron-args: --num-layers: expected a value, found the argument --hidden-size");
  EXPECT_EQ(error_of(minimal("--tensor-model-parallel-size two")),
            "--megatron-args: --tensor-model-parallel-size: expected an integer from 1 to 100000, found 'two'");
  EXPECT_EQ(error_of(minimal("--normalization rmsnorm")),
            "--megatron-args: --normalization: expected one of LayerNorm, RMSNorm, found 'rmsnorm' (did you mean 'RMSNorm'?)");
  EXPECT_EQ(error_of(minimal("--batch-size 4")),
            "--megatron-args: --batch-size: --batch-size argument is no longer valid, use --micro-batch-size instead");
  // The last of a repeated argument wins, as in argparse.
  EXPECT_EQ(option(read(minimal("--num-layers 8")), "layers"), 8);
}

TEST(MegatronArgs, RequiredArguments) {
  EXPECT_EQ(error_of("--hidden-size 256"),
            "--megatron-args: --num-layers: expected a value (either num-layers or encoder-num-layers should be specified), "
            "found none");
  EXPECT_EQ(error_of("--num-layers 2 --num-attention-heads 2"),
            "--megatron-args: --hidden-size: expected a value (Megatron-LM requires it), found none");
  EXPECT_CONTAINS(error_of("--num-layers 2 --hidden-size 256"), "--num-attention-heads: expected a value");
  EXPECT_CONTAINS(error_of("--num-layers 2 --hidden-size 256 --num-attention-heads 2"), "--seq-length: expected a value");
  EXPECT_CONTAINS(error_of("--num-layers 2 --hidden-size 256 --num-attention-heads 2 --seq-length 8"),
                  "--max-position-embeddings: expected a value");
  EXPECT_CONTAINS(error_of("--num-layers 2 --hidden-size 256 --num-attention-heads 2 --seq-length 8 "
                           "--max-position-embeddings 8 --vocab-size 10"),
                  "--micro-batch-size: expected a value");
  EXPECT_EQ(error_of("--num-layers 2 --hidden-size 256 --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 "
                     "--micro-batch-size 1 --tokenizer-type HuggingFaceTokenizer"),
            "--megatron-args: --vocab-size: expected the vocabulary's size: --tokenizer-type HuggingFaceTokenizer reads it "
            "from the tokenizer's files, which pipegrid does not read; give --vocab-size (the tokenizer's vocabulary) or "
            "--padded-vocab-size, found neither");
  // --encoder-num-layers and --encoder-seq-length stand in, not beside.
  const MegatronLaunch encoder = read("--encoder-num-layers 3 --hidden-size 256 --num-attention-heads 8 --encoder-seq-length 64 "
                                      "--max-position-embeddings 64 --micro-batch-size 1 --vocab-size 100");
  EXPECT_EQ(option(encoder, "layers"), 3);
  EXPECT_EQ(option(encoder, "sequence"), 64);
  EXPECT_CONTAINS(error_of(minimal("--encoder-seq-length 64")), "--encoder-seq-length: expected it exclusive of --seq-length");
  EXPECT_CONTAINS(error_of(minimal("--encoder-num-layers 4")), "cannot have both num-layers and encoder-num-layers specified");
}

TEST(MegatronArgs, ReleaseChecks) {
  EXPECT_EQ(error_of(minimal("--fp16 --bf16")),
            "--megatron-args: --bf16: Only one of fp16 and bf16 should be True; found --fp16 and --bf16");
  EXPECT_EQ(error_of(minimal("--tensor-model-parallel-size 3")),
            "--megatron-args: --num-attention-heads: num_attention_heads (8) must be a multiple of "
            "tensor_model_parallel_size (3).");
  EXPECT_EQ(error_of(minimal("--max-position-embeddings 64")),
            "--megatron-args: --max-position-embeddings: max_position_embeddings (64) must be greater than or equal to "
            "seq_length (128).");
  EXPECT_EQ(error_of(minimal("--num-attention-heads 6")),
            "--megatron-args: --hidden-size: expected a multiple of --num-attention-heads (6), found 256");
  EXPECT_EQ(error_of(minimal("--pipeline-model-parallel-size 3")),
            "--megatron-args: --num-layers: Number of layers (4) should be divisible by the pipeline-model-parallel size (3)");
  EXPECT_CONTAINS(error_of(minimal("--recompute-granularity full --recompute-num-layers 1")),
                  "recompute_method must be \"block\" or \"uniform\"");
  EXPECT_CONTAINS(error_of(minimal("--recompute-granularity full --recompute-method block")),
                  "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 4");
  EXPECT_EQ(error_of(minimal("--global-batch-size 7")),
            "--megatron-args: --global-batch-size: expected a multiple of --micro-batch-size (2) times the data-parallel "
            "size, found 7");
  EXPECT_EQ(error_of(minimal("--no-position-embedding")),
            "--megatron-args: --no-position-embedding: --no-position-embedding is deprecated, use --position-embedding-type");
  EXPECT_EQ(option(read(minimal("--no-position-embedding --position-embedding-type rope")), "rotary"), 1);
  EXPECT_CONTAINS(error_of(minimal("--deterministic-mode --use-flash-attn")),
                  "Flash attention can not be used in deterministic mode.");
  EXPECT_CONTAINS(error_of(minimal("--fp32-residual-connection")),
                  "residual connection in fp32 only supported when using fp16 or bf16.");
  EXPECT_CONTAINS(error_of(minimal("--attention-backend local")), "only supported with --spec local");
}

TEST(MegatronArgs, VocabularyPadding) {
  // tokenizer.py: ceil(V / (--make-vocab-size-divisible-by x tp)) x that.
  EXPECT_EQ(option(read(minimal("--tokenizer-type NullTokenizer --vocab-size 50000 --tensor-model-parallel-size 2")),
                   "vocabulary"),
            50176);  // 50001 to a multiple of 256
  EXPECT_EQ(option(read(minimal("--vocab-size 50257 --tensor-model-parallel-size 8")), "vocabulary"), 51200);
  EXPECT_EQ(option(read(minimal("--vocab-size 50257 --make-vocab-size-divisible-by 1")), "vocabulary"), 50257);
  EXPECT_EQ(option(read(minimal("--vocab-size 1024")), "vocabulary"), 1024);  // already a multiple of 128
  EXPECT_EQ(option(read(minimal("--padded-vocab-size 50001")), "vocabulary"), 50001);  // as given, never padded
  EXPECT_EQ(option(read(minimal("--tokenizer-type TikTokenizer").replace(minimal().find("--vocab-size 1000"), 17, "")),
                   "vocabulary"),
            131072);
  const MegatronLaunch hf = read(minimal("--tokenizer-type HuggingFaceTokenizer --vocab-size 32000"));
  EXPECT_EQ(option(hf, "vocabulary"), 32000);
  EXPECT_TRUE(has_note(hf, "taken as the vocabulary of HuggingFaceTokenizer"));
  EXPECT_CONTAINS(error_of(minimal("--tokenizer-type NullTokenizer").replace(minimal().find("--vocab-size 1000"), 17, "")),
                  "--vocab-size: expected a value: --tokenizer-type NullTokenizer takes its vocabulary from it");
}

TEST(MegatronArgs, SwigluDefaultFfn) {
  // validate_args: int((4 h 2 / 3) / 64) x 64 with --swiglu; 4 h without.
  const std::string base = "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --seq-length 16 "
                           "--max-position-embeddings 16 --micro-batch-size 1 --vocab-size 100 ";
  const MegatronLaunch swiglu = read(base + "--swiglu");
  EXPECT_EQ(option(swiglu, "ffn"), 10880);
  EXPECT_TRUE(has_note(swiglu, "--ffn-hidden-size: 10880 = int((4 x 4096 x 2 / 3) / 64) x 64"));
  EXPECT_EQ(option(read(base), "ffn"), 16384);
  EXPECT_EQ(option(read(base + "--swiglu --ffn-hidden-size 11008"), "ffn"), 11008);
}

TEST(MegatronArgs, GroupedQueryAttention) {
  const MegatronLaunch gqa = read(minimal("--group-query-attention --num-query-groups 2 --tensor-model-parallel-size 2"));
  EXPECT_EQ(option(gqa, "query_groups"), 2);
  // The release's default is one group (multi-query attention).
  const MegatronLaunch mqa = read(minimal("--group-query-attention"));
  EXPECT_EQ(option(mqa, "query_groups"), 1);
  EXPECT_TRUE(has_note(mqa, "1 key/value group"));
  // Without --group-query-attention the groups are the heads.
  const MegatronLaunch mha = read(minimal("--num-query-groups 2"));
  EXPECT_EQ(option(mha, "query_groups"), 8);
  EXPECT_TRUE(has_note(mha, "--num-query-groups 2: no effect without --group-query-attention"));
  EXPECT_EQ(error_of(minimal("--group-query-attention --num-query-groups 2 --tensor-model-parallel-size 4")),
            "--megatron-args: --num-query-groups: num_query_groups (2) must be a multiple of tensor_model_parallel_size (4).");
  EXPECT_EQ(error_of(minimal("--group-query-attention --num-query-groups 3")),
            "--megatron-args: --num-query-groups: expected a divisor of --num-attention-heads (8), found 3");
  EXPECT_EQ(option(read(minimal("--kv-channels 32")), "heads"), 8);
  EXPECT_EQ(error_of(minimal("--kv-channels 64")),
            "--megatron-args: --kv-channels: not modelled: heads of 64 channels; the gpt model's are --hidden-size / "
            "--num-attention-heads = 32 wide; drop it to simulate without it");
}

TEST(MegatronArgs, VirtualStages) {
  const std::string eight = minimal("--num-layers 16 --pipeline-model-parallel-size 4 ");
  const MegatronLaunch per_layer = read(eight + "--num-layers-per-virtual-pipeline-stage 2");
  EXPECT_EQ(per_layer.virtual_stages, 2);  // 16 / (4 x 2)
  EXPECT_EQ(per_layer.schedule, "interleaved-1f1b");
  EXPECT_EQ(read(eight + "--num-virtual-stages-per-pipeline-rank 4").virtual_stages, 4);
  const MegatronLaunch one = read(eight + "--num-layers-per-virtual-pipeline-stage 4");
  EXPECT_EQ(one.virtual_stages, 1);  // one chunk per rank: plain 1F1B
  EXPECT_EQ(one.schedule, "1f1b-sno");
  EXPECT_EQ(error_of(eight + "--num-layers-per-virtual-pipeline-stage 3"),
            "--megatron-args: --num-layers-per-virtual-pipeline-stage: number of layers per pipeline stage (4) must be "
            "divisible by number of layers per virtual pipeline stage (3)");
  EXPECT_CONTAINS(error_of(eight + "--num-virtual-stages-per-pipeline-rank 3"),
                  "num_layers_per_pipeline_rank 4 should be divisible by vp_size 3");
  EXPECT_CONTAINS(error_of(eight + "--num-layers-per-virtual-pipeline-stage 2 --num-virtual-stages-per-pipeline-rank 2"),
                  "No more than one of the following arguments can be set at the same time");
  EXPECT_CONTAINS(error_of(eight + "--num-layers-per-virtual-pipeline-stage 2 --decoder-first-pipeline-num-layers 4"),
                  "please use --num-virtual-stages-per-pipeline-rank");
  EXPECT_CONTAINS(error_of(minimal("--num-layers-per-virtual-pipeline-stage 2")),
                  "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1");
  EXPECT_CONTAINS(error_of(minimal("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                                   "--no-overlap-p2p-communication")),
                  "pipeline-model-parallel size should be greater than 2");
  // Uneven first and last stages.
  EXPECT_EQ(error_of(eight + "--decoder-first-pipeline-num-layers 3"),
            "--megatron-args: --decoder-first-pipeline-num-layers: number of layers at middle stage: 13 must be divisible "
            "by the middle pipeline model parallel size 3");
  EXPECT_CONTAINS(error_of(eight + "--decoder-first-pipeline-num-layers 3 --num-virtual-stages-per-pipeline-rank 2"),
                  "number of layers at first stage: 3 must be divisible by virtual pipeline parallel degree 2");
  EXPECT_CONTAINS(error_of(minimal("--decoder-last-pipeline-num-layers 4")),
                  "expected --pipeline-model-parallel-size > 1");
  EXPECT_CONTAINS(error_of(minimal("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 "
                                   "--decoder-last-pipeline-num-layers 1")),
                  "the first and last stages hold 2 of the 4 layers (--num-layers); expected all of them");
  EXPECT_EQ(read(eight + "--decoder-last-pipeline-num-layers 1 --decoder-first-pipeline-num-layers 3").decoder_last_pipeline_num_layers,
            1);
}

// Zero Bubble's interleaved layout (its examples/pretrain_zero_bubble.sh):
// every layer a chunk, the embedding and the loss a chunk each: 22 + 2 = 24
// layers of the split over p = 8 ranks, v = 3.
TEST(MegatronArgs, TheEmbeddingAndTheLossCountedInThePipelineSplit) {
  const std::string base = minimal("--num-layers 22 --pipeline-model-parallel-size 8 ");
  const MegatronLaunch both = read(base + "--account-for-embedding-in-pipeline-split "
                                          "--account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 1");
  EXPECT_TRUE(both.embedding_in_pipeline_split);
  EXPECT_TRUE(both.loss_in_pipeline_split);
  EXPECT_EQ(both.virtual_stages, 3);
  EXPECT_EQ(both.schedule, "interleaved-1f1b");
  EXPECT_CONTAINS(error_of(base + "--account-for-embedding-in-pipeline-split"),
                  "Number of layers (23) should be divisible by the pipeline-model-parallel size (8)");
  EXPECT_CONTAINS(error_of(minimal("--num-layers 16 --pipeline-model-parallel-size 4 "
                                   "--account-for-loss-in-pipeline-split --decoder-first-pipeline-num-layers 4")),
                  "cannot be combined with --decoder-first-pipeline-num-layers");
}

TEST(MegatronArgs, NoOverlapP2pCommunicationMakesStageTransfersBlocking) {
  const MegatronLaunch blocking = read(minimal("--pipeline-model-parallel-size 2 --no-overlap-p2p-communication"));
  EXPECT_TRUE(blocking.blocking_transfers);
  EXPECT_TRUE(has_note(blocking, "--no-overlap-p2p-communication: blocking stage transfers"));
  // Without the flag sends overlap (although Megatron's non-interleaved 1F1B blocks: a known gap).
  const MegatronLaunch overlapped = read(minimal("--pipeline-model-parallel-size 2"));
  EXPECT_FALSE(overlapped.blocking_transfers);
  EXPECT_FALSE(has_note(overlapped, "--no-overlap-p2p-communication"));
}

TEST(MegatronArgs, TpCommOverlapAndParamGatherWithTheStepAreReadWithTheReleasesChecks) {
  // megatron/training/arguments.py's asserts, in its words.
  EXPECT_CONTAINS(error_of(minimal("--tp-comm-overlap")),
                  "--tp-comm-overlap: Tensor parallel communication/GEMM overlap can happen only when sequence "
                  "parallelism is enabled");
  EXPECT_CONTAINS(error_of(minimal("--tensor-model-parallel-size 2 --tp-comm-overlap")),
                  "only when sequence parallelism is enabled");
  EXPECT_TRUE(read(minimal("--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap")).tp_comm_overlap);
  EXPECT_FALSE(read(minimal("--tensor-model-parallel-size 2 --sequence-parallel")).tp_comm_overlap);
  const std::string step = "--overlap-param-gather-with-optimizer-step";
  EXPECT_CONTAINS(error_of(minimal(step)), step + ": " + step + " only supported with distributed optimizer");
  EXPECT_CONTAINS(error_of(minimal("--use-distributed-optimizer " + step)),
                  "Must use " + step + " with --overlap-param-gather");
  const std::string gathered = "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather ";
  EXPECT_CONTAINS(error_of(minimal(gathered + step)), step + " only supported with interleaved pipeline parallelism");
  const MegatronLaunch interleaved =
      read("--num-layers 16 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128 "
           "--micro-batch-size 2 --vocab-size 1000 --pipeline-model-parallel-size 2 "
           "--num-layers-per-virtual-pipeline-stage 4 " +
           gathered + step);
  EXPECT_TRUE(has_note(interleaved, "pipegrid starts it after the step, as --overlap-param-gather does"));
  // At tensor parallel 1 the release turns sequence parallelism off; above,
  // it is read.
  const MegatronLaunch off = read(minimal("--sequence-parallel"));
  EXPECT_FALSE(off.sequence_parallel);
  EXPECT_TRUE(has_note(off, "the release turns it off at tensor parallel 1"));
  EXPECT_TRUE(read(minimal("--tensor-model-parallel-size 2 --sequence-parallel")).sequence_parallel);
  EXPECT_FALSE(read(minimal("--tensor-model-parallel-size 2")).sequence_parallel);
}

TEST(MegatronArgs, DistributedDataParallelArgumentsAreReadWithTheReleasesChecks) {
  const MegatronLaunch plain = read(minimal(""));
  EXPECT_FALSE(plain.distributed_optimizer || plain.overlap_grad_reduce || plain.overlap_param_gather);
  EXPECT_FALSE(plain.ddp_bucket_size.has_value());
  const MegatronLaunch all =
      read(minimal("--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 1000000"));
  EXPECT_TRUE(all.distributed_optimizer && all.overlap_grad_reduce && all.overlap_param_gather);
  EXPECT_EQ(all.ddp_bucket_size, 1000000);
  // megatron/training/arguments.py's asserts, in its words.
  EXPECT_CONTAINS(error_of(minimal("--overlap-param-gather --overlap-grad-reduce")),
                  "--overlap-param-gather only supported with distributed optimizer");
  EXPECT_CONTAINS(error_of(minimal("--overlap-param-gather --use-distributed-optimizer")),
                  "Must use --overlap-param-gather with --overlap-grad-reduce");
  EXPECT_CONTAINS(error_of(minimal("--overlap-grad-reduce --ddp-bucket-size 10 --ddp-num-buckets 4")),
                  "Cannot specify both --ddp-num-buckets and --ddp-bucket-size");
  EXPECT_TRUE(has_note(read(minimal("--ddp-bucket-size 10")), "no effect without --overlap-grad-reduce"));
}

TEST(MegatronArgs, ContextParallelismIsReadWithRingAttentionOnly) {
  EXPECT_EQ(read(minimal("")).context_parallel, 1);
  EXPECT_EQ(read(minimal("--context-parallel-size 2")).context_parallel, 2);
  EXPECT_EQ(read(minimal("--context-parallel-size 4 --cp-comm-type p2p")).context_parallel, 4);
  EXPECT_EQ(error_of(minimal("--context-parallel-size 2 --cp-comm-type a2a")),
            "--megatron-args: --cp-comm-type: not modelled: --cp-comm-type a2a: pipegrid models the ring attention of "
            "p2p (keys and values passed round the ring, overlapped with the attention's blocks); a2a (Ulysses) "
            "all-to-alls the heads exchanges differently; drop it to simulate without it");
  EXPECT_CONTAINS(error_of(minimal("--context-parallel-size 2 --cp-comm-type p2p allgather")), "--cp-comm-type allgather");
  EXPECT_CONTAINS(error_of(minimal("--context-parallel-size 2 --cp-comm-type ring")),
                  "expected p2p, a2a, allgather or a2a+p2p, found 'ring'");
  EXPECT_TRUE(has_note(read(minimal("--cp-comm-type a2a")), "--cp-comm-type: no effect at --context-parallel-size 1"));
  EXPECT_CONTAINS(error_of(minimal("--context-parallel-size 4 --hierarchical-context-parallel-sizes 2 2")),
                  "hierarchical context parallelism");
  EXPECT_TRUE(has_note(read(minimal("--context-parallel-size 4 --hierarchical-context-parallel-sizes 4")),
                       "one level, the whole context-parallel group"));
}

TEST(MegatronArgs, OtherRefusalsAndNotes) {
  EXPECT_NO_THROW(read(minimal("--context-parallel-size 1 --expert-model-parallel-size 1 --num-experts 0")));
  // Issue 32: mixture of experts is read (tests/test_moe.cpp has the rest).
  EXPECT_EQ(read(minimal("--num-experts 8")).model.options.at("num_experts"), 8);
  EXPECT_CONTAINS(error_of(minimal("--num-experts 8 --moe-layer-recompute")), "recomputing the MoE layer");
  EXPECT_CONTAINS(error_of(minimal("--use-checkpoint-args")), "come from the checkpoint");
  EXPECT_CONTAINS(error_of(minimal("--fp8-format hybrid")), "FP8 is a recipe on top of 16-bit mixed precision");
  EXPECT_CONTAINS(error_of(minimal("--position-embedding-type none")), "--position-embedding-type: not modelled");
  EXPECT_CONTAINS(error_of(minimal("--disable-bias-linear --add-qkv-bias")), "--add-qkv-bias: not modelled");
  EXPECT_CONTAINS(error_of(minimal("--pipeline-model-parallel-size 2 --microbatch-group-size-per-virtual-pipeline-stage 4")),
                  "groups of --pipeline-model-parallel-size (2) micro-batches");
  // Noted: accepted, one note per reason naming the arguments as given.
  const MegatronLaunch noted = read(minimal("--no-masked-softmax-fusion --no-bias-dropout-fusion --manual-gc"));
  EXPECT_TRUE(has_note(noted, "--no-masked-softmax-fusion, --no-bias-dropout-fusion: kernel fusion"));
  EXPECT_TRUE(has_note(noted, "--manual-gc: host-side pauses"));
  EXPECT_TRUE(noted.ignored.empty());
  // Optimizer and attention.
  EXPECT_EQ(read(minimal("--optimizer sgd")).optimizer, "momentum");
  EXPECT_FALSE(read(minimal("--attention-backend unfused --bf16")).use_flash_attn);
  EXPECT_TRUE(read(minimal("--attention-backend flash")).use_flash_attn);
  EXPECT_FALSE(read(minimal("--bf16 --transformer-impl local")).use_flash_attn);
  EXPECT_FALSE(read(minimal()).use_flash_attn);  // fp32: unfused
  EXPECT_EQ(option(read(minimal()), "flash_attention"), 0);
  EXPECT_TRUE(read(minimal()).fp32_gradients);
  EXPECT_TRUE(has_note(read(minimal("--use-flash-attn")), "legacy models only"));
}

TEST(MegatronArgs, SelectiveRecomputation) {
  // core_v0.14.0: validate_args turns --recompute-activations into selective
  // granularity and refuses a method with it; TransformerConfig refuses
  // layers with it.
  const MegatronLaunch selective = read(minimal("--recompute-granularity selective"));
  EXPECT_TRUE(selective.recompute.selective);
  EXPECT_FALSE(selective.recompute.full);
  EXPECT_TRUE(read(minimal("--recompute-activations")).recompute.selective);
  const MegatronLaunch replaced = read(minimal("--recompute-granularity full --recompute-activations"));
  EXPECT_TRUE(replaced.recompute.selective);
  EXPECT_FALSE(replaced.recompute.full);
  EXPECT_TRUE(has_note(replaced, "--recompute-activations: sets the granularity selective, replacing "
                                 "--recompute-granularity full"));
  EXPECT_EQ(error_of(minimal("--recompute-activations --recompute-granularity full --recompute-method uniform "
                             "--recompute-num-layers 1")),
            "--megatron-args: --recompute-method: recompute method is not yet supported for selective recomputing "
            "granularity");
  EXPECT_EQ(error_of(minimal("--recompute-granularity selective --recompute-num-layers 2")),
            "--megatron-args: --recompute-num-layers: When using recompute_granularity: selective recompute_num_layers "
            "must be None.");
  EXPECT_TRUE(read(minimal("--recompute-granularity selective --recompute-modules core_attn")).recompute.selective);
  EXPECT_EQ(error_of(minimal("--recompute-granularity selective --recompute-modules core_attn mlp")),
            "--megatron-args: --recompute-modules: not modelled: selective recomputation of modules other than the "
            "attention core (core_attn, the default); drop it to simulate without it");
  EXPECT_TRUE(has_note(read(minimal("--recompute-modules core_attn")),
                       "--recompute-modules core_attn: no effect without --recompute-granularity selective"));
  // 16-bit gradients: Megatron's table counts their fp32 copy, pipegrid does not.
  EXPECT_FALSE(read(minimal("--fp16")).fp32_gradients);
  EXPECT_TRUE(has_note(read(minimal("--fp16")), "gradients: fp16 (2 bytes per parameter)"));
  EXPECT_TRUE(read(minimal("--fp16 --accumulate-allreduce-grads-in-fp32")).fp32_gradients);
  EXPECT_FALSE(has_note(read(minimal("--fp16 --accumulate-allreduce-grads-in-fp32")), "gradients:"));
}

TEST(MegatronArgs, TableCoversTheReleaseOnce) {
  std::set<std::string> names;
  for (const MegatronArgument& argument : megatron_arguments()) {
    EXPECT_EQ(argument.name.rfind("--", 0), 0u) << argument.name;
    EXPECT_TRUE(names.insert(argument.name).second) << argument.name << " twice";
    if (argument.treatment == MegatronTreatment::Ignored || argument.treatment == MegatronTreatment::Noted ||
        argument.treatment == MegatronTreatment::Refused || argument.treatment == MegatronTreatment::Retired) {
      EXPECT_FALSE(argument.reason.empty()) << argument.name;
    }
  }
  // add_megatron_arguments of core_v0.14.0: 513 add_argument calls, one
  // of them with two names (--save-interval, --persistent-save-interval).
  EXPECT_EQ(names.size(), 514u);
}

TEST(MegatronArgs, DocumentationListsEveryArgument) {
  const std::string doc = read_text_file(std::string(PIPEGRID_SOURCE_DIR) + "/docs/megatron.md");
  for (const MegatronArgument& argument : megatron_arguments())
    EXPECT_NE(doc.find("`" + argument.name + "`"), std::string::npos) << argument.name << " is not in docs/megatron.md";
  EXPECT_NE(doc.find(kMegatronRelease), std::string::npos);
}

}  // namespace
}  // namespace pipegrid

namespace pipegrid {
namespace {

// Issue 32 item 3: the FP8 recipe's arguments (docs/megatron.md, FP8).
TEST(MegatronArgs, Fp8FormatAndRecipe) {
  EXPECT_EQ(read(minimal("--bf16 --fp8-format hybrid")).fp8_format, "hybrid");
  EXPECT_EQ(read(minimal("--fp16 --fp8-format e4m3 --fp8-recipe delayed")).fp8_format, "e4m3");
  EXPECT_EQ(read(minimal("--bf16")).fp8_format, "");
  const MegatronLaunch tensorwise = read(minimal("--bf16 --fp8-format hybrid --fp8-recipe tensorwise"));
  EXPECT_TRUE(has_note(tensorwise, "--fp8-recipe tensorwise: modelled as delayed scaling"));
  EXPECT_TRUE(has_note(read(minimal("--bf16 --fp8-recipe delayed")), "no effect without --fp8-format"));
  const MegatronLaunch delayed = read(minimal("--bf16 --fp8-format hybrid --fp8-margin 0 --fp8-amax-history-len 1024"));
  EXPECT_EQ(delayed.fp8_format, "hybrid");
  EXPECT_EQ(error_of(minimal("--fp8-format hybrid")),
            "--megatron-args: --fp8-format: FP8 is a recipe on top of 16-bit mixed precision in pipegrid; expected "
            "--bf16 or --fp16 with --fp8-format hybrid, found neither (fp32 weights)");
  EXPECT_EQ(error_of(minimal("--bf16 --fp8-format e5m2")),
            "--megatron-args: --fp8-format: expected one of e4m3, hybrid, found 'e5m2'");
  EXPECT_EQ(error_of(minimal("--bf16 --fp8-format hybrid --fp8-recipe mxfp8")),
            "--megatron-args: --fp8-recipe: not modelled: mxfp8 (MX block scaling) runs on Blackwell GPUs only, and "
            "pipegrid's FP8 devices are Hopper's (H100, H200, H800); give delayed or tensorwise");
  EXPECT_CONTAINS(error_of(minimal("--bf16 --fp8-format hybrid --fp8-recipe blockwise")),
                  "--fp8-recipe: not modelled: blockwise scaling");
  EXPECT_CONTAINS(error_of(minimal("--bf16 --fp8-format hybrid --fp8-param-gather")),
                  "--fp8-param-gather: not modelled: FP8 parameters");
  for (const char* unmodelled : {"--no-fp8-wgrad", "--first-last-layers-bf16"})
    EXPECT_CONTAINS(error_of(minimal(std::string("--bf16 --fp8-format hybrid ") + unmodelled)),
                    std::string(unmodelled) + ": not modelled: some layers or GEMMs of an FP8 run in 16 bits");
}

}  // namespace
}  // namespace pipegrid
