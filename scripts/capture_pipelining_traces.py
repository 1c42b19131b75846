#!/usr/bin/env python3
"""Capture PyTorch profiler (Kineto) traces of torch.distributed.pipelining's own schedules.

Test data for `pipegrid trace import` (issue 31): one Chrome trace per rank of a real
pipeline-parallel run, with GPU kernels (cat "kernel"), NCCL kernels where NCCL runs,
record_function ranges (PipelineStage / schedule actions, ProfilerStep#N) and the profiler's
"distributedInfo" block.

Run it ON the lent GPU machine (one GPU; PyTorch 2.11 in the system python), from the
repository root:

    OUT=/some/dir python3 scripts/capture_pipelining_traces.py
    # or scripts/capture_pipelining_traces.sh (prints the machine, runs this under timeout 420)

All ranks share the one GPU (time-sliced CUDA contexts, one process per rank). NCCL refuses two
ranks on one GPU ("Duplicate GPU detected": init.cc compares peers' hostHash and busId), so the
script tries, per run, these approaches in order and falls back on failure:

  nccl-hostid   NCCL with a distinct NCCL_HOSTID per rank: the ranks look like separate hosts,
                the duplicate-GPU check (same hostHash AND same busId) no longer fires, and
                send/recv go through NCCL's socket transport over loopback. Real NCCL SendRecv
                kernels in the traces. A 45-second probe (one exchange) decides whether to try it.
  gloo-staged   Gloo process group. ProcessGroupGloo::send/recv hand the tensor's raw data
                pointer to Gloo's TCP transport with no device check, so CUDA tensors must not
                reach them: this script wraps torch.distributed.batch_isend_irecv / send / recv
                (the entry points the pipelining stage and schedules call through `dist.`) to
                copy CUDA tensors through host memory, and forces object send/recv onto the CPU.
                Compute stays on the GPU; no NCCL kernels (host copies instead).
  single-process  One process holding every stage (world size 1); adjacent stages pass
                tensors locally. Last resort; a one-rank trace.

Layout written (the device tool returns at most 8 files from $OUT, so runs are packed):

    $OUT/log.txt                  what ran, each attempt, failures with the workers' log tails
    $OUT/summary.json             every run's meta.json, and the NCCL probe's result
    $OUT/traces-<n>.tar.gz        <run>/rank<r>.json (Chrome trace), <run>/meta.json,
                                  <run>/worker-rank<r>.log, for each captured run;
                                  <run>-failed/ and nccl-probe/ hold the logs of what failed

A run is one schedule at one world size: <run> is the schedule's name for 2 ranks (GPipe, 1F1B,
Interleaved1F1B, ZBVZeroBubble, InterleavedZeroBubble, DualPipeV, LoopedBFS) and
<schedule>-<w>ranks otherwise. meta.json holds the world size, stages per rank and the
stage-to-rank map, micro-batches, the model's shape, torch/CUDA/NCCL versions, the GPU's name,
the approach used, and per rank every iteration's wall-clock time and CUDA-event span (which
iterations the profiler recorded is marked).

The parent process never imports torch; each attempt runs the ranks as child processes with a
wall-clock limit (killed on expiry), and no attempt starts past the overall budget. `--dry-run`
prints the plan without running anything.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

# name -> (class name in torch.distributed.pipelining, stages per rank, stage placement)
# "loop": rank r holds stages r, r+W, ...; "v": rank r holds stages r and 2W-1-r.
SCHEDULES = {
    "GPipe": ("ScheduleGPipe", 1, "loop"),
    "1F1B": ("Schedule1F1B", 1, "loop"),
    "Interleaved1F1B": ("ScheduleInterleaved1F1B", 2, "loop"),
    "LoopedBFS": ("ScheduleLoopedBFS", 2, "loop"),
    "InterleavedZeroBubble": ("ScheduleInterleavedZeroBubble", 2, "loop"),
    "ZBVZeroBubble": ("ScheduleZBVZeroBubble", 2, "v"),
    "DualPipeV": ("ScheduleDualPipeV", 2, "v"),
}
APPROACHES = ("nccl-hostid", "gloo-staged", "single-process")
DEFAULT_RUNS = "GPipe:2,1F1B:2,Interleaved1F1B:2,ZBVZeroBubble:2,1F1B:4,InterleavedZeroBubble:2,DualPipeV:2"
EXIT_UNSUPPORTED = 3  # a worker's exit status when this torch lacks the schedule: no approach helps
ARCHIVE_LIMIT_BYTES = 15 * 1024 * 1024
MAX_ARCHIVES = 6


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT"), help="output folder (default: $OUT)")
    p.add_argument("--work-dir", default=None,
                   help="staging folder for the unpacked runs (default: a new folder in /tmp)")
    p.add_argument("--runs", default=DEFAULT_RUNS,
                   help="comma-separated SCHEDULE:WORLD_SIZE, in priority order (default: %(default)s)")
    p.add_argument("--approaches", default=",".join(APPROACHES),
                   help="approaches to try, in order (default: %(default)s)")
    p.add_argument("--budget-s", type=float, default=270.0,
                   help="no attempt starts later than this many seconds after the start (default: %(default)s)")
    p.add_argument("--attempt-timeout-s", type=float, default=90.0,
                   help="wall-clock limit of one attempt (all its ranks) (default: %(default)s)")
    p.add_argument("--probe-timeout-s", type=float, default=45.0,
                   help="wall-clock limit of the NCCL probe (default: %(default)s)")
    p.add_argument("--layers", type=int, default=8, help="transformer blocks in the whole model")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--untraced-steps", type=int, default=1,
                   help="iterations before the profiler starts (communicator set-up, shape checks)")
    p.add_argument("--wait", type=int, default=1, help="torch.profiler.schedule wait")
    p.add_argument("--warmup", type=int, default=1, help="torch.profiler.schedule warmup")
    p.add_argument("--active", type=int, default=2, help="torch.profiler.schedule active")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    # Internal: a child process (one rank of one attempt).
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is None and not args.dry_run and not args.out:
        p.error("no output folder: set OUT or pass --out")
    args.run_list = parse_runs(p, args.runs)
    args.approach_list = [a.strip() for a in args.approaches.split(",") if a.strip()]
    for a in args.approach_list:
        if a not in APPROACHES:
            p.error(f"--approaches: unknown approach {a!r}; expected some of {', '.join(APPROACHES)}")
    for name in ("layers", "hidden", "heads", "seq", "vocab", "micro_batches", "micro_batch_size", "active"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.hidden % args.heads:
        p.error(f"--hidden ({args.hidden}) must be a multiple of --heads ({args.heads})")
    return args


def parse_runs(p, text):
    runs = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, _, world = item.partition(":")
        if name not in SCHEDULES:
            p.error(f"--runs: unknown schedule {name!r} in {item!r}; expected one of {', '.join(SCHEDULES)}")
        try:
            world_size = int(world) if world else 2
        except ValueError:
            p.error(f"--runs: world size {world!r} in {item!r} is not an integer")
        if world_size < 2:
            p.error(f"--runs: world size must be at least 2 in {item!r} (single-process is a fallback)")
        run_id = name if world_size == 2 else f"{name}-{world_size}ranks"
        runs.append({"run_id": run_id, "schedule": name, "world_size": world_size})
    if not runs:
        p.error("--runs lists no run")
    return runs


def stages_of_rank(rank, world_size, stages_per_rank, placement):
    if placement == "v":
        assert stages_per_rank == 2
        return [rank, 2 * world_size - 1 - rank]
    return [rank + k * world_size for k in range(stages_per_rank)]


def layers_of_stage(stage, num_stages, layers):
    base, extra = divmod(layers, num_stages)
    first = stage * base + min(stage, extra)
    return list(range(first, first + base + (1 if stage < extra else 0)))


# ---------------------------------------------------------------- parent: launching and packing


class Log:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")
        self.start = time.monotonic()

    def __call__(self, message):
        line = f"[{time.monotonic() - self.start:7.1f}s] {message}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def approach_env(approach, rank):
    env = {"NCCL_DEBUG": "WARN"}
    if approach == "nccl-hostid":
        env.update({
            "NCCL_HOSTID": f"pipegrid-capture-rank{rank}",
            "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_NET": "Socket",
            "NCCL_IB_DISABLE": "1",
            "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1",
            "NCCL_NVLS_ENABLE": "0",
            "NCCL_MNNVL_ENABLE": "0",
            "NCCL_COLLNET_ENABLE": "0",
        })
    return env


def launch(log, task, world_size, approach, run_dir, timeout_s):
    """Runs one attempt's ranks as child processes; returns (ok, reason)."""
    os.makedirs(run_dir, exist_ok=True)
    port = free_port()
    children = []
    for rank in range(world_size):
        env = dict(os.environ)
        env.update(approach_env(approach, rank))
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
        })
        worker_task = dict(task, approach=approach, run_dir=run_dir, timeout_s=timeout_s)
        log_file = open(os.path.join(run_dir, f"worker-rank{rank}.log"), "w", encoding="utf-8")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(worker_task)]
        child = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        children.append((child, log_file))
    try:
        return wait_for_ranks(log, children, world_size, run_dir, timeout_s)
    finally:
        # Also on SIGTERM (the driver's `timeout`): no rank outlives the attempt.
        for child, log_file in children:
            if child.poll() is None:
                try:
                    os.killpg(child.pid, signal.SIGKILL)  # the child's own session: it and its helpers
                except ProcessLookupError:
                    pass
                child.wait()
            log_file.close()


def wait_for_ranks(log, children, world_size, run_dir, timeout_s):
    deadline = time.monotonic() + timeout_s
    reason = None
    first_failure_at = None
    while True:
        codes = [c.poll() for c, _ in children]
        if all(code is not None for code in codes):
            break
        now = time.monotonic()
        failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
        if failed and first_failure_at is None:
            first_failure_at = now
        if first_failure_at is not None and now - first_failure_at > 10:
            reason = f"rank(s) {failed} failed; the other ranks were stopped 10 s later"
            break
        if now > deadline:
            reason = f"timed out after {timeout_s:.0f} s"
            break
        time.sleep(0.2)
    for child, _ in children:
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
    codes = [c.returncode for c, _ in children]
    if reason is None and any(codes):
        reason = f"exit codes {codes}"
    if reason is None:
        return True, "ok"
    if all(os.path.exists(os.path.join(run_dir, f"status.rank{r}.json")) for r in range(world_size)):
        return True, f"captured, but the shutdown went wrong: {reason}"
    if EXIT_UNSUPPORTED in codes:
        reason = "unsupported by this torch: " + reason
    for rank in range(world_size):
        tail = log_tail(os.path.join(run_dir, f"worker-rank{rank}.log"), 25)
        log(f"    rank {rank} (exit {codes[rank]}) log tail:\n" + "\n".join("      | " + l for l in tail))
    return False, reason


def log_tail(path, lines):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError as e:
        return [f"(no log: {e})"]


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_task(args):
    return {
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq": args.seq,
        "vocab": args.vocab, "micro_batches": args.micro_batches,
        "micro_batch_size": args.micro_batch_size, "dtype": args.dtype,
        "untraced_steps": args.untraced_steps, "wait": args.wait, "warmup": args.warmup,
        "active": args.active,
    }


def write_meta(run, approach, world_size, run_dir, attempts):
    """Merges the ranks' status files into run_dir/meta.json; returns the merged dict."""
    statuses = [read_json(os.path.join(run_dir, f"status.rank{r}.json")) for r in range(world_size)]
    first = statuses[0]
    meta = {
        "run": run["run_id"],
        "schedule": run["schedule"],
        "schedule_class": first["schedule_class"],
        "approach": approach,
        "backend": first["backend"],
        "world_size": world_size,
        "requested_world_size": run["world_size"],
        "stages_per_rank": first["stages_per_rank"],
        "num_stages": first["num_stages"],
        "stage_placement": first["stage_placement"],
        "rank_stages": {str(s["rank"]): s["stages"] for s in statuses},
        "stage_layers": first["stage_layers"],
        "micro_batches": first["micro_batches"],
        "micro_batch_size": first["micro_batch_size"],
        "model": first["model"],
        "profiler": first["profiler"],
        "versions": first["versions"],
        "gpu": first["gpu"],
        "env": first["env"],
        "iterations": {str(s["rank"]): s["iterations"] for s in statuses},
        "traces": {str(s["rank"]): {"file": f"rank{s['rank']}.json", "bytes": s["trace_bytes"]}
                   for s in statuses},
        "attempts": attempts,
    }
    with open(os.path.join(run_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    for r in range(world_size):
        os.remove(os.path.join(run_dir, f"status.rank{r}.json"))
    return meta


def pack(log, work_dir, run_ids, out):
    """Packs the captured runs into at most MAX_ARCHIVES tar.gz files of at most ~15 MiB."""
    if not run_ids:
        return []
    sizes = {}
    for run_id in run_ids:
        probe_path = os.path.join(work_dir, f".size-{run_id}.tar.gz")
        with tarfile.open(probe_path, "w:gz") as tar:
            tar.add(os.path.join(work_dir, run_id), arcname=run_id)
        sizes[run_id] = os.path.getsize(probe_path)
        os.remove(probe_path)
    groups = []
    for run_id in run_ids:
        if sizes[run_id] > ARCHIVE_LIMIT_BYTES:
            log(f"  {run_id}: {sizes[run_id]} bytes compressed, over the 15 MiB a returned file may hold; left out")
            continue
        if groups and sum(sizes[r] for r in groups[-1]) + sizes[run_id] <= ARCHIVE_LIMIT_BYTES:
            groups[-1].append(run_id)
        elif len(groups) < MAX_ARCHIVES:
            groups.append([run_id])
        else:
            log(f"  {run_id}: no room left in {MAX_ARCHIVES} archives; left out")
    written = []
    for n, group in enumerate(groups, 1):
        path = os.path.join(out, f"traces-{n}.tar.gz")
        with tarfile.open(path, "w:gz") as tar:
            for run_id in group:
                tar.add(os.path.join(work_dir, run_id), arcname=run_id)
        log(f"  {os.path.basename(path)}: {', '.join(group)} ({os.path.getsize(path)} bytes)")
        written.append({"archive": os.path.basename(path), "runs": group})
    return written


def parent_main(args):
    plan_lines = [f"  run {r['run_id']}: {r['schedule']} ({SCHEDULES[r['schedule']][0]}), "
                  f"{r['world_size']} ranks x {SCHEDULES[r['schedule']][1]} stage(s)" for r in args.run_list]
    if args.dry_run:
        print("plan:")
        print("\n".join(plan_lines))
        print(f"  approaches in order: {', '.join(args.approach_list)}")
        print(f"  budget {args.budget_s:.0f} s, attempt limit {args.attempt_timeout_s:.0f} s, "
              f"NCCL probe limit {args.probe_timeout_s:.0f} s")
        return 0
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work_dir = os.path.abspath(args.work_dir or tempfile.mkdtemp(prefix="pipegrid-pipelining-traces."))
    os.makedirs(work_dir, exist_ok=True)
    log = Log(os.path.join(out, "log.txt"))
    log(f"capture_pipelining_traces: python {sys.version.split()[0]}, staging in {work_dir}, output {out}")
    log("plan:\n" + "\n".join(plan_lines))
    start = time.monotonic()
    alive = list(args.approach_list)
    summary = {"runs": {}, "failed_runs": {}, "nccl_probe": None, "approaches": list(alive)}

    def on_sigterm(signum, frame):
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_sigterm)
    captured = []
    try:
        probe_nccl(args, log, alive, summary, work_dir, captured)
    except SystemExit as e:
        log(f"{e} during the NCCL probe")
        summary["stopped"] = str(e)
        alive.clear()

    try:
        capture_runs(args, log, start, alive, summary, work_dir, captured)
    except SystemExit as e:
        log(f"{e}: packing what was captured, and the interrupted attempt's worker logs")
        summary["stopped"] = str(e)
        captured.extend(sorted(d for d in os.listdir(work_dir)
                               if os.path.isdir(os.path.join(work_dir, d)) and d not in captured))
    log("packing")
    summary["archives"] = pack(log, work_dir, captured, out)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
        f.write("\n")
    ok_runs = sorted(summary["runs"])
    log(f"done in {time.monotonic() - start:.0f} s: captured {len(ok_runs)} run(s): {', '.join(ok_runs) or 'none'}; "
        f"failed: {', '.join(sorted(summary['failed_runs'])) or 'none'}")
    return 0 if ok_runs else 1


def probe_nccl(args, log, alive, summary, work_dir, captured):
    """Decides whether nccl-hostid stays in alive; a failed probe's worker logs join captured."""
    if "nccl-hostid" not in alive:
        return
    probe_dir = os.path.join(work_dir, "nccl-probe")
    log(f"NCCL probe (2 ranks on one GPU, distinct NCCL_HOSTID, socket transport over lo), "
        f"limit {args.probe_timeout_s:.0f} s")
    ok, reason = launch(log, {"mode": "probe"}, 2, "nccl-hostid", probe_dir, args.probe_timeout_s)
    result = {"ok": ok, "reason": reason}
    if ok:
        try:
            result.update(read_json(os.path.join(probe_dir, "status.rank0.json")))
        except (OSError, ValueError) as e:
            result["status_error"] = str(e)
    summary["nccl_probe"] = result
    log(f"NCCL probe: {'works' if ok else 'failed: ' + reason}")
    if not ok:
        alive.remove("nccl-hostid")
        captured.append("nccl-probe")


def capture_runs(args, log, start, alive, summary, work_dir, captured):
    """Runs every planned run, falling back through the approaches; appends packable folders to captured."""
    succeeded_any = False
    for run in args.run_list:
        attempts = []
        done = False
        for approach in list(alive):
            if approach == "single-process" and succeeded_any:
                log(f"{run['run_id']}: not trying single-process (a multi-rank approach worked for another run; "
                    f"this failure is this schedule's)")
                break
            remaining = args.budget_s - (time.monotonic() - start)
            if remaining < 30:
                log(f"{run['run_id']}: skipped, {remaining:.0f} s of the budget left")
                attempts.append({"approach": approach, "ok": False, "reason": "budget spent"})
                break
            timeout_s = min(args.attempt_timeout_s, remaining)
            world_size = 1 if approach == "single-process" else run["world_size"]
            run_dir = os.path.join(work_dir, run["run_id"])
            shutil.rmtree(run_dir, ignore_errors=True)
            log(f"{run['run_id']}: {approach}, {world_size} rank(s), limit {timeout_s:.0f} s")
            t0 = time.monotonic()
            task = dict(model_task(args), mode="capture", schedule=run["schedule"])
            ok, reason = launch(log, task, world_size, approach, run_dir, timeout_s)
            attempt = {"approach": approach, "world_size": world_size, "ok": ok, "reason": reason,
                       "seconds": round(time.monotonic() - t0, 1)}
            attempts.append(attempt)
            if ok:
                try:
                    meta = write_meta(run, approach, world_size, run_dir, attempts)
                except (OSError, ValueError, KeyError) as e:
                    attempt.update(ok=False, reason=f"status files unreadable: {e!r}")
                    log(f"{run['run_id']}: {approach} ran but its status files are unreadable: {e!r}")
                    continue
                summary["runs"][run["run_id"]] = meta
                captured.append(run["run_id"])
                succeeded_any = True
                sizes = ", ".join(f"rank{r} {t['bytes']} B" for r, t in sorted(meta["traces"].items()))
                log(f"{run['run_id']}: captured with {approach} in {attempt['seconds']} s ({sizes})")
                done = True
                break
            log(f"{run['run_id']}: {approach} failed ({reason})")
            if reason.startswith("unsupported"):
                break
            if not succeeded_any or reason.startswith("timed out"):
                # Broken from the start, or it hangs: do not spend more of the budget on it.
                if len(alive) > 1:
                    alive.remove(approach)
                    log(f"  dropping {approach} for the remaining runs")
        if not done:
            summary["failed_runs"][run["run_id"]] = attempts
            # Keep the failed attempt's worker logs for the archive.
            run_dir = os.path.join(work_dir, run["run_id"])
            if os.path.isdir(run_dir):
                failed_dir = os.path.join(work_dir, run["run_id"] + "-failed")
                shutil.rmtree(failed_dir, ignore_errors=True)
                os.rename(run_dir, failed_dir)
                captured.append(run["run_id"] + "-failed")


# ---------------------------------------------------------------- worker: one rank (imports torch)


class Unsupported(Exception):
    """This torch cannot run the requested schedule at all."""



def install_host_staging(torch, dist):
    """Makes a Gloo group carry CUDA tensors by copying them through host memory.

    ProcessGroupGloo::send/recv pass the tensor's data pointer straight to Gloo's TCP transport,
    so CUDA tensors must not reach them. torch.distributed.pipelining calls
    dist.batch_isend_irecv (stage/schedule P2P), dist.send / dist.recv (newer versions' set-up
    handshakes) and dist.send_object_list / recv_object_list (shape inference) through the
    torch.distributed package, which is what is replaced here. P2POp itself is left alone: it
    checks its op against distributed_c10d's own isend/irecv.
    """
    cpu = torch.device("cpu")
    original = {name: getattr(dist, name) for name in
                ("batch_isend_irecv", "send", "recv", "send_object_list", "recv_object_list")}
    # Transfers a rank addresses to itself (all stages in one process: the schedules' first
    # neighbour handshake) never reach Gloo: sends queue here, receives take from the queue.
    to_self = []

    class SelfRecvWork:
        def __init__(self, host):
            self.host = host

        def wait(self, timeout=None):
            if self.host is not None:
                self.host.copy_(to_self.pop(0))
                self.host = None
            return True

        def is_completed(self):
            return self.host is None

    class StagedWork:
        """All of one batch's operations; wait() also copies received host buffers to the GPU."""

        def __init__(self, works, copies):
            self.works = works
            self.copies = copies
            self.done = False

        def wait(self, timeout=None):
            if not self.done:
                with torch.profiler.record_function("pipegrid:gloo_staged_wait"):
                    for w in self.works:
                        w.wait()
                    for device_tensor, host_tensor in self.copies:
                        device_tensor.copy_(host_tensor)
                self.done = True
            return True

        def is_completed(self):
            return self.done or all(w.is_completed() for w in self.works)

        def is_success(self):
            return True

        def exception(self):
            return None

        def synchronize(self):
            self.wait()

        def get_future(self):
            fut = torch.futures.Future()
            self.wait()
            fut.set_result(None)
            return fut

    def staged_batch_isend_irecv(p2p_op_list):
        works, copies, keep = [], [], []
        with torch.profiler.record_function("pipegrid:gloo_staged_batch_isend_irecv"):
            for op in p2p_op_list:
                name = getattr(op.op, "__name__", str(op.op))
                tensor = op.tensor
                host = tensor.detach().to(cpu) if tensor.is_cuda and name == "isend" else (
                    torch.empty_like(tensor, device=cpu) if tensor.is_cuda else tensor)
                kwargs = {"group": op.group, "tag": op.tag}
                peer = getattr(op, "peer", None)
                group_peer = getattr(op, "group_peer", None)
                to_myself = (peer == dist.get_rank()) if peer is not None else (
                    group_peer == dist.get_rank(op.group))
                if to_myself and name == "isend":
                    to_self.append(tensor.detach().to(cpu, copy=True))
                elif to_myself and name == "irecv":
                    works.append(SelfRecvWork(host))
                    if host is not tensor:
                        copies.append((tensor, host))
                elif name == "isend":
                    if peer is not None:
                        kwargs["dst"] = peer
                    else:
                        kwargs["group_dst"] = group_peer
                    works.append(dist.distributed_c10d.isend(host, **kwargs))
                    keep.append(host)
                elif name == "irecv":
                    if peer is not None:
                        kwargs["src"] = peer
                    else:
                        kwargs["group_src"] = group_peer
                    works.append(dist.distributed_c10d.irecv(host, **kwargs))
                    if host is not tensor:
                        copies.append((tensor, host))
                else:
                    raise RuntimeError(f"gloo-staged: unexpected P2POp op {name!r}")
        staged = StagedWork([w for w in works if w is not None], copies)
        staged.keep_alive = keep
        return [staged]

    def staged_send(tensor, *a, **kw):
        if tensor.is_cuda:
            tensor = tensor.detach().to(cpu)
        return original["send"](tensor, *a, **kw)

    def staged_recv(tensor, *a, **kw):
        if not tensor.is_cuda:
            return original["recv"](tensor, *a, **kw)
        host = torch.empty_like(tensor, device=cpu)
        result = original["recv"](host, *a, **kw)
        tensor.copy_(host)
        return result

    def cpu_send_object_list(*a, **kw):
        kw["device"] = cpu
        return original["send_object_list"](*a, **kw)

    def cpu_recv_object_list(*a, **kw):
        kw["device"] = cpu
        return original["recv_object_list"](*a, **kw)

    dist.batch_isend_irecv = staged_batch_isend_irecv
    dist.send = staged_send
    dist.recv = staged_recv
    dist.send_object_list = cpu_send_object_list
    dist.recv_object_list = cpu_recv_object_list


def build_stage_module(torch, task, stage, num_stages, device, dtype):
    nn = torch.nn
    F = torch.nn.functional
    hidden, heads, seq, vocab = task["hidden"], task["heads"], task["seq"], task["vocab"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Stage(nn.Module):
        """Stage 0 embeds token ids; the last stage ends with a LayerNorm and the vocabulary head."""

        def __init__(self, n_blocks, first, last):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden) if first else None
            self.pos = nn.Embedding(seq, hidden) if first else None
            self.blocks = nn.ModuleList(Block() for _ in range(n_blocks))
            self.ln_f = nn.LayerNorm(hidden) if last else None
            self.head = nn.Linear(hidden, vocab, bias=False) if last else None

        def forward(self, x):
            if self.tok is not None:
                x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            for block in self.blocks:
                x = block(x)
            if self.head is not None:
                x = self.head(self.ln_f(x))
            return x

    torch.manual_seed(1000 + stage)
    n_blocks = len(layers_of_stage(stage, num_stages, task["layers"]))
    return Stage(n_blocks, stage == 0, stage == num_stages - 1).to(device=device, dtype=dtype)


def worker_versions(torch, dist):
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        versions["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        versions["cudnn"] = repr(e)
    try:
        nccl = torch.cuda.nccl.version()
        versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception as e:  # noqa: BLE001
        versions["nccl"] = repr(e)
    versions["gloo_available"] = dist.is_gloo_available()
    versions["nccl_available"] = dist.is_nccl_available()
    return versions


def worker_gpu(torch):
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "multiprocessors": props.multi_processor_count,
            "memory_bytes": props.total_memory, "capability": f"{props.major}.{props.minor}"}


def worker_main(task_json):
    task = json.loads(task_json)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    run_dir = task["run_dir"]
    print(f"worker rank {rank}/{world_size}: {task['mode']} {task.get('schedule', '')} ({task['approach']})",
          flush=True)
    t_import = time.monotonic()
    import datetime

    import torch
    import torch.distributed as dist

    print(f"torch {torch.__version__} imported in {time.monotonic() - t_import:.1f} s; "
          f"cuda {torch.version.cuda}, available {torch.cuda.is_available()}", flush=True)
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    approach = task["approach"]
    backend = "nccl" if approach == "nccl-hostid" else "gloo"
    # Leave the attempt's own limit to the parent; this one only bounds a lost peer.
    pg_timeout = datetime.timedelta(seconds=max(30, int(task["timeout_s"])))
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=pg_timeout)
    if backend == "gloo":
        install_host_staging(torch, dist)
    try:
        if task["mode"] == "probe":
            result = worker_probe(torch, dist, rank, world_size, device)
        else:
            result = worker_capture(torch, dist, task, rank, world_size, device, backend)
        with open(os.path.join(run_dir, f"status.rank{rank}.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, sort_keys=True)
    except Unsupported as e:
        print(f"unsupported: {e}", flush=True)
        os._exit(EXIT_UNSUPPORTED)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)  # a peer may be blocked in a collective; do not wait for a clean shutdown
    # Every step ended with a device synchronisation, so no transfer is in flight: leave without
    # destroy_process_group (a shutdown that hangs would cost the attempt its whole limit).
    print("worker done", flush=True)
    sys.stderr.flush()
    os._exit(0)


def worker_probe(torch, dist, rank, world_size, device):
    peer = (rank + 1) % world_size
    send = torch.full((1 << 20,), float(rank + 1), device=device)
    recv = torch.zeros_like(send)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, (rank - 1) % world_size)]
    if rank % 2:
        ops.reverse()
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    torch.cuda.synchronize()
    expected = float((rank - 1) % world_size + 1)
    if not bool((recv == expected).all()):
        raise RuntimeError(f"probe: received {recv[:4].tolist()}..., expected {expected}")
    return {"rank": rank, "versions": worker_versions(torch, dist), "gpu": worker_gpu(torch),
            "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}


def worker_capture(torch, dist, task, rank, world_size, device, backend):
    import torch.distributed.pipelining as pipelining
    from torch.distributed.pipelining import PipelineStage

    schedule_name = task["schedule"]
    class_name, stages_per_rank, placement = SCHEDULES[schedule_name]
    schedule_class = getattr(pipelining, class_name, None)
    if schedule_class is None:
        from torch.distributed.pipelining import schedules as schedules_module
        schedule_class = getattr(schedules_module, class_name, None)
    if schedule_class is None:
        raise Unsupported(f"this torch ({torch.__version__}) has no {class_name}")
    dtype = torch.bfloat16 if task["dtype"] == "bf16" else torch.float32
    if world_size == 1 and stages_per_rank == 1:
        num_stages = 1
        my_stages = [0]
    else:
        num_stages = world_size * stages_per_rank
        my_stages = stages_of_rank(rank, world_size, stages_per_rank, placement)
    mbs, seq, hidden, vocab = task["micro_batch_size"], task["seq"], task["hidden"], task["vocab"]
    n_mb = task["micro_batches"]

    stages = []
    for s in my_stages:
        module = build_stage_module(torch, task, s, num_stages, device, dtype)
        if s == 0:
            example_in = torch.zeros(mbs, seq, dtype=torch.long, device=device)
        else:
            example_in = torch.empty(mbs, seq, hidden, dtype=dtype, device=device)
        if s == num_stages - 1:
            example_out = torch.empty(mbs, seq, vocab, dtype=dtype, device=device)
        else:
            example_out = torch.empty(mbs, seq, hidden, dtype=dtype, device=device)
        # Keywords only: the positional order after `device` changed between releases.
        stages.append(PipelineStage(module, s, num_stages, device, input_args=(example_in,),
                                    output_args=(example_out,)))

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())

    if stages_per_rank == 1 or num_stages == 1:
        schedule = schedule_class(stages[0], n_mb, loss_fn=loss_fn)
    else:
        schedule = schedule_class(stages, n_mb, loss_fn=loss_fn)

    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    tokens = torch.randint(0, vocab, (n_mb * mbs, seq), device=device, generator=gen)
    targets = torch.randint(0, vocab, (n_mb * mbs, seq), device=device, generator=gen)
    holds_first = 0 in my_stages
    holds_last = (num_stages - 1) in my_stages

    def one_step():
        args = (tokens,) if holds_first else ()
        if holds_last:
            losses = []
            schedule.step(*args, target=targets, losses=losses)
        else:
            schedule.step(*args)

    iterations = []

    def timed_step(index, profiled):
        torch.cuda.synchronize()
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start_event.record()
        one_step()
        end_event.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        iterations.append({"index": index, "profiled": profiled, "wall_s": round(wall, 6),
                           "cuda_event_ms": round(start_event.elapsed_time(end_event), 4)})
        print(f"  step {index}: {wall * 1e3:.1f} ms wall{' (profiled)' if profiled else ''}", flush=True)

    step_index = 0
    for _ in range(task["untraced_steps"]):
        timed_step(step_index, False)
        step_index += 1

    trace_path = os.path.join(task["run_dir"], f"rank{rank}.json")
    exported = []

    def on_trace_ready(prof):
        prof.export_chrome_trace(trace_path)
        exported.append(trace_path)

    from torch.profiler import ProfilerActivity, profile
    from torch.profiler import schedule as profiler_schedule

    wait, warmup, active = task["wait"], task["warmup"], task["active"]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=profiler_schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                 on_trace_ready=on_trace_ready, record_shapes=False, with_stack=False,
                 profile_memory=False) as prof:
        for k in range(wait + warmup + active):
            timed_step(step_index, k >= wait + warmup)
            step_index += 1
            prof.step()
    if not exported:
        raise RuntimeError("the profiler produced no trace (on_trace_ready never ran)")
    return {
        "rank": rank,
        "schedule_class": f"{schedule_class.__module__}.{schedule_class.__name__}",
        "backend": backend,
        "stages": my_stages,
        "stages_per_rank": len(my_stages),
        "num_stages": num_stages,
        "stage_placement": placement if num_stages > 1 else "single",
        "stage_layers": {str(s): layers_of_stage(s, num_stages, task["layers"]) for s in range(num_stages)},
        "micro_batches": n_mb,
        "micro_batch_size": mbs,
        "model": {"kind": "gpt-like decoder (pre-LN, causal SDPA, GELU MLP 4x)", "layers": task["layers"],
                  "hidden": hidden, "heads": task["heads"], "seq": seq, "vocab": vocab, "dtype": task["dtype"],
                  "parameters_on_this_rank": sum(p.numel() for st in stages for p in st.submod.parameters())},
        "profiler": {"activities": ["CPU", "CUDA"], "record_shapes": False, "with_stack": False,
                     "untraced_steps": task["untraced_steps"], "wait": wait, "warmup": warmup, "active": active},
        "versions": worker_versions(torch, dist),
        "gpu": worker_gpu(torch),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("NCCL_", "TORCH_NCCL_", "CUDA_VISIBLE"))},
        "iterations": iterations,
        "trace_bytes": os.path.getsize(trace_path),
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker is not None:
        return worker_main(args.worker)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
