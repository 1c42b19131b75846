#!/bin/bash
# A GPT-3 175B pre-training launch on 16 nodes of 8 GPUs (pipegrid's test
# data for the Megatron-LM argument reader; the arguments follow the
# argument list of Megatron-LM's examples/gpt3 launch, with the shell
# variables expanded).

export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nproc_per_node 8 --nnodes 16 --node_rank 0 \
    --master_addr 10.0.0.1 --master_port 6000 \
    pretrain_gpt.py \
    --num-layers 96 \
    --hidden-size 12288 \
    --num-attention-heads 96 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --attention-backend auto \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --rampup-batch-size 16 16 5859375 \
    --train-samples 146484375 \
    --lr-decay-samples 126953125 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --init-method-std 0.006 \
    --clip-grad 1.0 \
    --fp16 \
    --lr 6.0e-5 \
    --lr-decay-style cosine \
    --min-lr 6.0e-6 \
    --lr-warmup-fraction .001 \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --data-path /data/gpt3/pile_text_document \
    --vocab-file /data/gpt3/gpt2-vocab.json \
    --merge-file /data/gpt3/gpt2-merges.txt \
    --split 949,50,1 \
    --log-interval 100 \
    --save-interval 10000 \
    --eval-interval 1000 \
    --save /checkpoints/gpt3-175b \
    --load /checkpoints/gpt3-175b \
    --eval-iters 10 \
    --tensorboard-dir /logs/gpt3-175b
