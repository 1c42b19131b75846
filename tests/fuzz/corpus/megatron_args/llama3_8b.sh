#!/bin/bash
# A Llama-3-style 8B launch: grouped-query attention, SwiGLU, rotary
# positions, RMSNorm, untied head, bf16, tensor parallel 2 x pipeline 4
# with 4 virtual stages per rank, full recomputation, mock data
# (pipegrid's test data for the Megatron-LM argument reader; the argument
# list follows Megatron-LM's examples/llama launch, variables expanded).

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node=8 --nnodes=1 pretrain_gpt.py \
  --use-mcore-models \
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
  --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 \
  --seq-length 8192 --max-position-embeddings 8192 \
  --position-embedding-type rope --rotary-base 500000 --rotary-percent 1.0 \
  --attention-dropout 0.0 --hidden-dropout 0.0 \
  --swiglu --normalization RMSNorm --norm-epsilon 1e-5 \
  --init-method-std 0.0134 \
  --attention-backend fused \
  --untie-embeddings-and-output-weights --disable-bias-linear \
  --micro-batch-size 1 --global-batch-size 128 \
  --train-samples 1953125000 --lr-decay-samples 1949218748 --lr-warmup-samples 3906252 \
  --lr 0.00015 --min-lr 0.00001 --lr-decay-style cosine \
  --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 \
  --bf16 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 \
  --num-layers-per-virtual-pipeline-stage 2 \
  --mock-data --tokenizer-type NullTokenizer --vocab-size 128256 \
  --split '99,1,0' --no-create-attention-mask-in-dataloader --num-workers 1 \
  --log-interval 1 --eval-iters 32 --eval-interval 100 --save-interval=1000 \
  --ckpt-format torch_dist --distributed-timeout-minutes 60 \
  --save "/checkpoints/llama3 8b" --tensorboard-dir /logs/llama3-8b 2>&1 | tee train.log
