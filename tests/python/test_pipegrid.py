"""The Python module pipegrid against the CLI it wraps (ctest label `python`).

Environment (tests/python/CMakeLists.txt): PYTHONPATH at the built package,
PIPEGRID the CLI, PIPEGRID_ROOT the source tree.
"""

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import pipegrid

PIPEGRID = os.environ["PIPEGRID"]
ROOT = os.environ["PIPEGRID_ROOT"]
COMMON = os.path.join(ROOT, "tests", "data", "common")
CHAIN2 = os.path.join(COMMON, "chain2-latency.xml")
TINY = os.path.join(COMMON, "tiny.json")
SWEEP_E2E = os.path.join(ROOT, "tests", "data", "sweep-e2e", "experiment.toml")


def cli(*args, cwd=None):
    return subprocess.run([PIPEGRID, *args], capture_output=True, text=True, cwd=cwd)


def flags_of(options):
    """The CLI flags of simulate's keywords (the mapping the sweeps use)."""
    words = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is not False and value is not None:
            words.append(f"{flag}={value}")
    return words


# Runs compared with `pipegrid simulate`: flushed and not, a generated model,
# a partitioner, a layout over several pipelines.
SIMULATE_CASES = {
    "1f1b-so-recompute-tiny": dict(platform=CHAIN2, profile=TINY, network="analytic", schedule="1f1b-so",
                                   micro_batches=4, recompute=True),
    "pipedream-tiny": dict(platform=CHAIN2, profile=TINY, network="analytic", schedule="pipedream"),
    "gpt-model-4xv100": dict(platform=os.path.join(ROOT, "platforms", "bapipe-4xv100-pcie3.xml"), model="gpt",
                             schedule="1f1b-sno", micro_batches=8, partition="megatron"),
    "bapipe-partitioner": dict(platform=CHAIN2, profile=TINY, network="analytic", schedule="1f1b-sno",
                               micro_batches=2, partitioner="bapipe", memory="2KiB"),
    "megatron-args-tensor-parallel": dict(platform=os.path.join(COMMON, "tp-h100-1x4.xml"), network="analytic",
                                          megatron_args="--num-layers 4 --hidden-size 256 --num-attention-heads 4 "
                                          "--seq-length 128 --max-position-embeddings 128 --vocab-size 1000 "
                                          "--micro-batch-size 1 --global-batch-size 4 --bf16 "
                                          "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                                          "--sequence-parallel"),
    "data-parallel-layout": dict(platform=os.path.join(COMMON, "ddp-ring4.xml"), profile=os.path.join(COMMON, "ddp4.json"),
                                 schedule="gpipe", micro_batches=2, pipeline_parallel=2, data_parallel=2),
}


class SimulateAgainstCli(unittest.TestCase):
    def test_metrics_timeline_and_svg_equal_the_cli(self):
        for case, options in SIMULATE_CASES.items():
            with self.subTest(case=case), tempfile.TemporaryDirectory() as folder:
                run = cli("simulate", *flags_of(options), "--json", "--csv", "timeline.csv", "--svg", "timeline.svg",
                          cwd=folder)
                self.assertEqual(run.returncode, 0, run.stderr)
                expected = json.loads(run.stdout)
                simulation = pipegrid.simulate(**options)
                self.assertEqual(sorted(simulation.metrics), sorted(expected))
                for key in expected:
                    self.assertEqual(simulation.metrics[key], expected[key], f"metric {key}")
                self.assertEqual(simulation.to_json(), run.stdout)
                with open(os.path.join(folder, "timeline.csv"), encoding="utf-8") as file:
                    expected_csv = file.read()
                self.assertEqual(simulation.timeline.to_csv(), expected_csv)
                with open(os.path.join(folder, "timeline.svg"), encoding="utf-8") as file:
                    self.assertEqual(simulation.timeline.svg(), file.read())
                self.assertEqual(simulation._repr_svg_(), simulation.timeline.svg())
                self.check_rows(simulation.timeline, expected_csv)

    def check_rows(self, timeline, expected_csv):
        lines = expected_csv.splitlines()
        self.assertTrue(lines[0].startswith("# hosts:"))
        self.assertEqual(timeline.hosts, lines[0][len("# hosts:"):].split())
        expected_rows = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
        self.assertGreater(len(expected_rows), 0)
        self.assertEqual(len(timeline.rows), len(expected_rows))
        self.assertEqual(len(timeline), len(expected_rows))
        for row, expected in zip(timeline.rows, expected_rows):
            self.assertEqual(tuple(row), pipegrid.TIMELINE_COLUMNS)
            for column, text in expected.items():
                value = row[column]
                if column in ("stream", "stage", "micro_batch", "mini_batch"):
                    self.assertIsInstance(value, int)
                    self.assertEqual(value, int(text))
                elif column in ("start_s", "end_s", "bytes", "memory_bytes"):
                    self.assertIsInstance(value, float)
                    self.assertEqual(value, float(text))
                else:
                    self.assertEqual(value, text)

    def test_plan_and_warnings(self):
        simulation = pipegrid.simulate(**SIMULATE_CASES["1f1b-so-recompute-tiny"])
        self.assertEqual(simulation.plan["schedule"], "1f1b-so")
        self.assertEqual(simulation.plan["micro_batches"], 4)
        self.assertIsInstance(simulation.warnings, list)

    def test_keywords_are_the_sweep_parameters(self):
        keywords = pipegrid.simulate_keywords()
        for name in ("platform", "profile", "model", "schedule", "micro_batches", "mini_batches", "partition",
                     "partitioner", "memory", "network", "recompute", "micro_batch_size", "tensor_parallel",
                     "data_parallel", "megatron_args", "layers"):
            self.assertIn(name, keywords)
        self.assertNotIn("json", keywords)
        self.assertNotIn("help", keywords)
        self.assertEqual(len(keywords), len(set(keywords)))


class Pandas(unittest.TestCase):
    @unittest.skipUnless(__import__("importlib").util.find_spec("pandas"), "pandas is not installed for this interpreter")
    def test_to_pandas(self):
        timeline = pipegrid.simulate(**SIMULATE_CASES["1f1b-so-recompute-tiny"]).timeline
        frame = timeline.to_pandas()
        self.assertEqual(list(frame.columns), list(pipegrid.TIMELINE_COLUMNS))
        self.assertEqual(len(frame), len(timeline.rows))
        self.assertEqual(frame["end_s"].max(), max(row["end_s"] for row in timeline.rows))

    def test_to_pandas_without_pandas_says_so(self):
        timeline = pipegrid.simulate(**SIMULATE_CASES["1f1b-so-recompute-tiny"]).timeline
        saved = sys.modules.get("pandas")
        sys.modules["pandas"] = None  # import pandas now raises ImportError
        try:
            with self.assertRaises(ImportError) as caught:
                timeline.to_pandas()
        finally:
            if saved is None:
                del sys.modules["pandas"]
            else:
                sys.modules["pandas"] = saved
        self.assertIn("needs pandas", str(caught.exception))


class Errors(unittest.TestCase):
    def test_error_classes(self):
        self.assertTrue(issubclass(pipegrid.Error, Exception))
        self.assertTrue(issubclass(pipegrid.InputError, pipegrid.Error))
        self.assertTrue(issubclass(pipegrid.InfeasibleError, pipegrid.InputError))
        self.assertTrue(issubclass(pipegrid.InternalError, pipegrid.Error))
        self.assertEqual(pipegrid.Error.__module__, "pipegrid")

    def test_unknown_keyword_names_the_closest(self):
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.simulate(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batch=4)
        self.assertEqual(str(caught.exception), "simulate: unknown keyword 'micro_batch' (did you mean 'micro_batches'?)")
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.explore(platform=CHAIN2, profile=TINY, mini_batch_sise=16)
        self.assertIn("unknown keyword 'mini_batch_sise' (did you mean 'mini_batch_size'?)", str(caught.exception))
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.simulate(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches=4, zzzzzzzz=1)
        self.assertEqual(str(caught.exception), "simulate: unknown keyword 'zzzzzzzz'")

    def test_bad_input_carries_the_cli_message(self):
        cases = {
            "missing profile": dict(platform=CHAIN2, profile=os.path.join(COMMON, "missing.json"), schedule="gpipe",
                                    micro_batches=2),
            "bad schedule": dict(platform=CHAIN2, profile=TINY, schedule="gpipf", micro_batches=2),
            "bad value": dict(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches="four"),
            "no platform": dict(profile=TINY, schedule="gpipe", micro_batches=2),
            "bad partition": dict(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches=2,
                                  partition=os.path.join(ROOT, "tests", "data", "bad-partition", "partition.json")),
        }
        for case, options in cases.items():
            with self.subTest(case=case):
                run = cli("simulate", *flags_of(options), "--json")
                self.assertEqual(run.returncode, 2, run.stdout)
                with self.assertRaises(pipegrid.InputError) as caught:
                    pipegrid.simulate(**options)
                self.assertEqual(run.stderr.splitlines()[0], "pipegrid: error: " + str(caught.exception).splitlines()[0])

    def test_no_partition_is_infeasible(self):
        with self.assertRaises(pipegrid.InfeasibleError):
            pipegrid.simulate(platform=CHAIN2, profile=TINY, network="analytic", schedule="1f1b-sno", micro_batches=2,
                              partitioner="bapipe", memory="100B")

    def test_switches_and_lists(self):
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.simulate(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches=2, recompute="yes")
        self.assertIn("keyword recompute is a switch", str(caught.exception))
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.simulate(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches=[2, 4])
        self.assertIn("keyword micro_batches takes one value", str(caught.exception))
        with self.assertRaises(pipegrid.InputError):
            pipegrid.simulate(platform=CHAIN2, profile=TINY, schedule="gpipe", micro_batches=True)
        # False and None leave a keyword out.
        same = pipegrid.simulate(platform=CHAIN2, profile=TINY, network="analytic", schedule="gpipe", micro_batches=2,
                                 recompute=False, memory=None)
        plain = pipegrid.simulate(platform=CHAIN2, profile=TINY, network="analytic", schedule="gpipe", micro_batches=2)
        self.assertEqual(same.metrics, plain.metrics)


class GilReleased(unittest.TestCase):
    def test_another_thread_runs_while_a_simulation_runs(self):
        # With a switch interval this long, the thread holding the GIL keeps
        # it until it releases it itself: the other thread appends before
        # simulate returns only if simulate released the GIL.
        order = []
        go = threading.Event()

        def other():
            go.wait()
            order.append("thread")

        thread = threading.Thread(target=other)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1000)
        try:
            thread.start()
            go.set()
            pipegrid.simulate(platform=os.path.join(ROOT, "platforms", "bapipe-8xv100-pcie3.xml"), model="gpt",
                              schedule="1f1b-sno", micro_batches=1024)
            order.append("simulate")
        finally:
            sys.setswitchinterval(interval)
            thread.join()
        self.assertEqual(order, ["thread", "simulate"])


# A script whose stdout is a pipe: "before" stays in Python's buffer while
# the simulations fork. A child that came back into the interpreter would
# print it (and "end", and run the atexit handler) a second time, or change
# the exit status.
FORK_SCRIPT = textwrap.dedent("""
    import atexit, os, sys, tempfile
    import pipegrid
    atexit.register(lambda: print("atexit"))
    print("before")
    chain2, tiny, experiment = sys.argv[1:4]
    options = dict(platform=chain2, profile=tiny, network="analytic", schedule="1f1b-so", micro_batches=4)
    first = pipegrid.simulate(**options)
    second = pipegrid.simulate(**options)
    assert first.metrics == second.metrics
    try:
        pipegrid.simulate(**dict(options, profile=tiny + ".missing"))
    except pipegrid.InputError:
        print("caught")
    try:
        pipegrid.simulate(**dict(options, schedule="1f1b-sno", micro_batches=2, partitioner="bapipe", memory="100B"))
    except pipegrid.InfeasibleError:
        print("infeasible")
    third = pipegrid.simulate(**options)
    assert third.metrics == first.metrics
    pipegrid.explore(platform=chain2, profile=tiny, mini_batch_size=8, network="analytic", jobs=2)
    try:
        pipegrid.explore(platform=chain2, profile=tiny, mini_batch_size=7, network="analytic", jobs=2)
    except pipegrid.InputError:
        print("explore refused")
    pipegrid.plan(server="dgx-a100-80gb", gpus=8, megatron_args="--num-layers 2 --hidden-size 512 "
                  "--num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 --fp16",
                  global_batch_size=8, jobs=2, top=2)
    with tempfile.TemporaryDirectory() as out:
        pipegrid.sweep(experiment, out, jobs=2)
    print("end")
    """)


class ForkedChildrenNeverReturnToPython(unittest.TestCase):
    def test_output_once_and_exit_status_zero(self):
        run = subprocess.run([sys.executable, "-c", FORK_SCRIPT, CHAIN2, TINY, SWEEP_E2E], capture_output=True, text=True)
        self.assertEqual(run.stdout, "before\ncaught\ninfeasible\nexplore refused\nend\natexit\n", run.stderr)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertNotIn("came back to the Python module", run.stderr)


class ExplorePlanSweep(unittest.TestCase):
    def test_explore_equals_the_cli(self):
        options = dict(platform=CHAIN2, profile=TINY, mini_batch_size=16, network="analytic", jobs=2)
        run = cli("explore", *flags_of(options), "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(pipegrid.explore(**options), json.loads(run.stdout))
        restricted = pipegrid.explore(**options, schedules=["gpipe", "1f1b-sno"], micro_batches=[2, 4])
        self.assertEqual({candidate["schedule"] for candidate in restricted["ranking"]}, {"gpipe", "1f1b-sno"})
        self.assertEqual({candidate["micro_batches"] for candidate in restricted["ranking"]}, {2, 4})

    def test_plan_equals_the_cli(self):
        options = dict(server="dgx-a100-80gb", gpus=8, megatron_args="--num-layers 4 --hidden-size 1024 "
                       "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --fp16",
                       global_batch_size=16, jobs=2, top=5)
        with tempfile.TemporaryDirectory() as folder:
            run = cli("plan", "--server", "dgx-a100-80gb", "--gpus", "8", "--megatron-args=" + options["megatron_args"],
                      "--global-batch-size", "16", "--jobs", "2", "--top", "5", "--output-json", "plan.json", cwd=folder)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(os.path.join(folder, "plan.json"), encoding="utf-8") as file:
                expected = json.load(file)
        result = pipegrid.plan(**options)
        self.assertEqual(result, expected)
        self.assertTrue(result["ranking"][0]["fits"])

    def test_sweep_rows_equal_the_cli(self):
        volatile = {"sim_wall_s", "shard", "finished_at", "pipegrid_version"}
        with tempfile.TemporaryDirectory() as folder:
            cli_out, python_out = os.path.join(folder, "cli"), os.path.join(folder, "python")
            run = cli("sweep", "run", SWEEP_E2E, "--out", cli_out, "--jobs", "2")
            self.assertEqual(run.returncode, 0, run.stderr)
            result = pipegrid.sweep(SWEEP_E2E, python_out, jobs=2)
            self.assertEqual(result["exit_status"], 0)
            self.assertIn("18 runs", result["summary"])
            expected = pipegrid.read_sweep(cli_out)
            self.assertEqual(len(result["runs"]), 18)
            self.assertEqual([{k: v for k, v in row.items() if k not in volatile} for row in result["runs"]],
                             [{k: v for k, v in row.items() if k not in volatile} for row in expected["runs"]])
            self.assertEqual(result["devices"], expected["devices"])
            self.assertEqual({row["status"] for row in result["runs"]}, {"ok", "oom", "infeasible"})
            # --set and --where as keywords.
            narrowed = pipegrid.sweep(SWEEP_E2E, os.path.join(folder, "narrowed"), jobs=2, set=["network=simgrid"],
                                      where="schedule == 'gpipe'")
            self.assertEqual({row["schedule"] for row in narrowed["runs"]}, {"gpipe"})
            self.assertEqual({row["network"] for row in narrowed["runs"]}, {"simgrid"})

    def test_sweep_bad_file_raises(self):
        with tempfile.TemporaryDirectory() as folder:
            bad = os.path.join(folder, "bad.toml")
            with open(bad, "w", encoding="utf-8") as file:
                file.write('schema = 1\nname = "bad"\n[defaults]\nmicro_batchez = 2\n')
            with self.assertRaises(pipegrid.InputError) as caught:
                pipegrid.sweep(bad, os.path.join(folder, "out"))
            self.assertIn("micro_batchez", str(caught.exception))


class ChakraAndKineto(unittest.TestCase):
    def test_export_chakra_writes_what_the_cli_writes(self):
        options = dict(platform=os.path.join(ROOT, "platforms", "bapipe-4xv100-pcie3.xml"), model="vgg16",
                       schedule="1f1b-sno", micro_batches=4)
        with tempfile.TemporaryDirectory() as folder:
            files = pipegrid.export_chakra(os.path.join(folder, "py"), **options)
            self.assertEqual([os.path.basename(f) for f in files], ["py.0.et", "py.1.et", "py.2.et", "py.3.et", "py.json"])
            run = cli("export", "--format", "chakra", "--out", os.path.join(folder, "cli"), *flags_of(options))
            self.assertEqual(run.returncode, 0, run.stderr)
            for rank in range(4):
                with open(os.path.join(folder, f"py.{rank}.et"), "rb") as a, open(os.path.join(folder, f"cli.{rank}.et"), "rb") as b:
                    self.assertEqual(a.read(), b.read())
            with self.assertRaises(pipegrid.InputError) as caught:
                pipegrid.export_chakra(os.path.join(folder, "bad"), **dict(options, schedule="1f1b-snoo"))
            self.assertIn("1f1b-snoo", str(caught.exception))

    def test_import_trace_equals_the_cli(self):
        case = os.path.join(ROOT, "tests", "data", "kineto-hand-cuda")
        traces = [os.path.join(case, "trace", f"rank{r}.json") for r in range(2)]
        measured = pipegrid.import_trace(traces, micro_batch_size=2)
        with open(os.path.join(case, "expected.timeline.csv"), encoding="utf-8") as file:
            self.assertEqual(measured.timeline.to_csv(), file.read())
        with open(os.path.join(case, "expected.profile.json"), encoding="utf-8") as file:
            self.assertEqual(measured.profile, json.load(file))
        with open(os.path.join(case, "expected.program.txt"), encoding="utf-8") as file:
            self.assertEqual(measured.program, file.read())
        self.assertIn("<svg", measured._repr_svg_())
        self.assertTrue(all(row["end_s"] >= row["start_s"] for row in measured.timeline.rows))
        with tempfile.TemporaryDirectory() as folder:
            paths = measured.save(folder)
            self.assertEqual(sorted(os.path.basename(p) for p in paths.values()),
                             ["measured.csv", "platform.xml", "profile.json", "program.txt"])
        with self.assertRaises(pipegrid.InputError) as caught:
            pipegrid.import_trace([traces[0]], micro_batch_size=2, mapp="x.json")
        self.assertIn("did you mean 'map'", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
