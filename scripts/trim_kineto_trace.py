#!/usr/bin/env python3
"""Trim a PyTorch profiler (Kineto) Chrome trace to one profiler step (issue 31).

Keeps what `pipegrid trace import` reads (docs/kineto.md), for the step named
--step (default: the last ProfilerStep#N on the CPU):
  - the ProfilerStep range itself and every user_annotation (record_function) range in it;
  - CPU ops in it that are top-level on their thread (directly under the
    step or under nothing: the forward's ops, the autograd engine's
    evaluate_function ops; not with --comm-ops-only) and the communication ops (record_param_comms,
    c10d::*, nccl:*), with args only for record_param_comms;
  - the runtime launches (cuda_runtime, cuda_driver) in it whose correlation
    id has a kernel, and those kernels (args: correlation, stream, device);
  - distributedInfo and the trace's other small top-level fields.
With --kernel-extents, of the compute kernels only the first-starting and
the last-ending of each group are kept (and their launches), a group being a
run of launches, in time order over all threads, from one thread inside the
same set of record_function ranges (any thread's), with no NCCL launch and no
communication op's start between them: the importer's actions (ranges,
anonymous blocks, the halves of an overlapped pair) are unions of groups and
take their time from their kernels' extent, so its timeline, profile and
Program are unchanged (only its count of kernels launched outside every
action changes; check with `pipegrid trace import` on both). NCCL kernels
are all kept.
Left out: nested CPU ops, flow events (ac2g, fwdbwd), memsets, memcpys, GPU
annotations, deviceProperties. Kernel names are cut to 48 characters (NCCL
kernels keep their ncclDevKernel_* prefix); times are rounded to 1 ns.
Output is compact JSON, one event per line.

Usage: scripts/trim_kineto_trace.py IN.json OUT.json [--step N] [--comm-ops-only] [--kernel-extents]
"""
import argparse
import bisect
import json


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--step", type=int, help="ProfilerStep number to keep (default: the last)")
    p.add_argument("--comm-ops-only", action="store_true",
                   help="keep no top-level CPU op but the communication ones (traces whose record_function ranges "
                        "are the actions: the anonymous-block rule needs the top-level ops)")
    p.add_argument("--kernel-extents", action="store_true",
                   help="keep only the first and last compute kernel of each group of launches (see above)")
    args = p.parse_args()
    with open(args.input) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
             and e.get("name", "").startswith("ProfilerStep#")]
    if not steps:
        raise SystemExit(f"{args.input}: no ProfilerStep#N range")
    if args.step is None:
        step = max(steps, key=lambda e: int(e["name"].split("#")[1]))
    else:
        matching = [e for e in steps if e["name"] == f"ProfilerStep#{args.step}"]
        if not matching:
            raise SystemExit(f"{args.input}: no ProfilerStep#{args.step}")
        step = matching[0]
    start, end = step["ts"], step["ts"] + step["dur"]

    def inside(e):
        return start <= e["ts"] <= end

    cpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and inside(e)),
                 key=lambda e: (e["ts"], -e["dur"]))
    kept = []
    open_by_thread = {}
    comm_starts = []  # start times of the communication ops, ascending
    for e in cpu:
        stack = open_by_thread.setdefault(e["tid"], [])
        while stack and not (stack[-1]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"]):
            stack.pop()
        parent = stack[-1] if stack else None
        top = parent is None or parent["name"].startswith("ProfilerStep#")
        name = e["name"]
        comm = name == "record_param_comms" or name.startswith(("c10d::", "nccl:"))
        if comm:
            comm_starts.append(e["ts"])
        if e["cat"] == "user_annotation" or (top and not args.comm_ops_only) or comm:
            out = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur")}
            if name == "record_param_comms":
                out["args"] = e.get("args", {})
            kept.append(out)
        stack.append(e)

    kernels = {e["args"]["correlation"]: e for e in events
               if e.get("ph") == "X" and e.get("cat") == "kernel" and "correlation" in e.get("args", {})}
    launches = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("cuda_runtime", "cuda_driver") or not inside(e):
            continue
        correlation = e.get("args", {}).get("correlation")
        kernel = kernels.get(correlation)
        if kernel is None:
            continue
        launches.append((e, correlation, kernel))
    if args.kernel_extents:
        ranges = [r for r in cpu if r["cat"] == "user_annotation" and not r["name"].startswith("ProfilerStep#")]
        comm_starts.sort()
        first, last = {}, {}  # group -> (time, launch index)
        group, key, previous = 0, None, None
        for i in sorted(range(len(launches)), key=lambda i: launches[i][0]["ts"]):
            e, _, kernel = launches[i]
            t = e["ts"]
            nccl = kernel["name"].startswith("nccl")
            this_key = (e["tid"], tuple(j for j, r in enumerate(ranges) if r["ts"] <= t <= r["ts"] + r["dur"]))
            comm_between = previous is not None and bisect.bisect_right(comm_starts, t) > bisect.bisect_right(comm_starts, previous)
            if nccl or this_key != key or comm_between:
                group += 1
            key, previous = (None if nccl else this_key), t
            if nccl:
                continue
            if group not in first or kernel["ts"] < first[group][0]:
                first[group] = (kernel["ts"], i)
            if group not in last or kernel["ts"] + kernel["dur"] > last[group][0]:
                last[group] = (kernel["ts"] + kernel["dur"], i)
        chosen = {i for _, i in first.values()} | {i for _, i in last.values()}
        launches = [item for i, item in enumerate(launches) if i in chosen or item[2]["name"].startswith("nccl")]
    for e, correlation, kernel in launches:
        kept.append({"ph": "X", "cat": e["cat"], "name": e["name"], "pid": e["pid"], "tid": e["tid"], "ts": e["ts"],
                     "dur": e["dur"], "args": {"correlation": correlation}})
        kept.append({"ph": "X", "cat": "kernel", "name": kernel["name"][:48], "pid": kernel["pid"], "tid": kernel["tid"],
                     "ts": kernel["ts"], "dur": kernel["dur"],
                     "args": {k: kernel["args"][k] for k in ("correlation", "stream", "device") if k in kernel["args"]}})
    for e in kept:
        e["ts"] = round(e["ts"], 3)
        e["dur"] = round(e["dur"], 3)
    kept.sort(key=lambda e: (e["ts"], str(e["pid"]), str(e["tid"]), e["name"]))
    out = {k: v for k, v in trace.items() if k not in ("traceEvents", "deviceProperties")}
    with open(args.output, "w") as f:
        f.write("{\n")
        for key, value in out.items():
            f.write(f"{json.dumps(key)}: {json.dumps(value, separators=(',', ':'))},\n")
        f.write('"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in kept))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
