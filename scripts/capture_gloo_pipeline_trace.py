#!/usr/bin/python3
"""Capture a real CPU Kineto trace of a two-process Gloo pipeline (issue 31).

Two processes, one stage each, run a 4-layer MLP split in two (layers 0-1 on
rank 0, 2-3 on rank 1) with GPipe by hand: every micro-batch's forward, then
every backward, activations and gradients moved with dist.send/dist.recv over
Gloo. Each rank runs under torch.profiler (CPU activity only) and writes
<out>/rank<r>.json, one profiler step (one mini-batch) after --warmup untraced
ones.

The record_function ranges are those `pipegrid trace import`'s default mapping
reads (docs/kineto.md), the same as torch.distributed.pipelining's GPipe:
"Forward <mb>" and "Backward <mb>" around each micro-batch's compute. The
receive that feeds an action is outside its range here (it is inside in
torch's schedules; the importer trims leading and trailing communication off
a range in CPU traces). Each send and receive is in a range named as the
runtime schedules of torch.distributed.pipelining name theirs,
"PP:<stage>SEND_F<mb>" etc.; a send's range ends in " bytes=<N>", its
message size, which the legacy profiler of this torch records nowhere else.
This torch build has no Kineto: the trace is the legacy profiler's bare
array of events, without distributedInfo (the rank is the file's position
on `trace import`'s command line).

Run with Debian's python3-torch (1.13; /usr/bin/python3, not a pyenv python):
  /usr/bin/python3 scripts/capture_gloo_pipeline_trace.py --out tests/data/kineto-cpu-gloo-gpipe/trace
"""
import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for rank0.json and rank1.json")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2, help="untraced mini-batches before the traced one")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_module(rank, hidden):
    torch.manual_seed(rank + 1)
    layers = []
    for _ in range(2):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def mini_batch(rank, model, args, inputs, targets):
    """One GPipe mini-batch: all forwards, then all backwards (in the forwards' order)."""
    peer = 1 - rank
    shape = (args.micro_batch_size, args.hidden)
    outputs, stashed = [], []
    for mb in range(args.micro_batches):
        if rank == 1:
            x = torch.empty(shape)
            with torch.profiler.record_function(f"PP:1RECV_F{mb}"):
                dist.recv(x, src=peer)
            x.requires_grad_()
        else:
            x = inputs[mb]
        with torch.profiler.record_function(f"Forward {mb}"):
            y = model(x)
            if rank == 1:
                y = torch.nn.functional.mse_loss(y, targets[mb])
        if rank == 0:
            with torch.profiler.record_function(f"PP:0SEND_F{mb} bytes={y.numel() * y.element_size()}"):
                dist.send(y.detach(), dst=peer)
        stashed.append(x)
        outputs.append(y)
    for mb in range(args.micro_batches):
        if rank == 0:
            grad = torch.empty(shape)
            with torch.profiler.record_function(f"PP:0RECV_B{mb}"):
                dist.recv(grad, src=peer)
        with torch.profiler.record_function(f"Backward {mb}"):
            if rank == 1:
                outputs[mb].backward()
            else:
                outputs[mb].backward(grad)
        if rank == 1:
            grad = stashed[mb].grad
            with torch.profiler.record_function(f"PP:1SEND_B{mb} bytes={grad.numel() * grad.element_size()}"):
                dist.send(grad, dst=peer)
    with torch.no_grad():
        for p in model.parameters():
            p -= 1e-3 * p.grad
            p.grad = None


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = stage_module(rank, args.hidden)
    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(args.micro_batch_size, args.hidden, generator=gen) for _ in range(args.micro_batches)]
    targets = [torch.randn(args.micro_batch_size, args.hidden, generator=gen) for _ in range(args.micro_batches)]
    for _ in range(args.warmup):
        mini_batch(rank, model, args, inputs, targets)
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.profiler.record_function("ProfilerStep#0"):
            mini_batch(rank, model, args, inputs, targets)
    dist.barrier()
    path = os.path.join(args.out, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    dist.destroy_process_group()


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(worker, args=(args, free_port()), nprocs=2, join=True)


if __name__ == "__main__":
    main()
