"""pipegrid from Python: simulate, explore, plan and sweep (docs/python.md).

Every function takes keyword arguments named as the sweep parameters are:
the CLI's flags with '-' turned into '_' (``micro_batches=8`` is
``--micro-batches 8``), parsed by the CLI's own option definitions. A switch
takes True or False, a keyword that takes several values a list, None
leaves a keyword out. An unknown keyword raises pipegrid.InputError naming
the closest known one.

Errors: pipegrid.Error, and its subclasses InputError (bad input, the CLI's
exit status 2), InfeasibleError (an InputError: no partition exists) and
InternalError (a bug); str(error) is pipegrid's message.

Simulations run in forked processes (SimGrid runs one engine per process);
the GIL is released while they run.
"""

import csv as _csv
import io as _io
import json as _json
import os as _os
import tempfile as _tempfile

from . import _pipegrid
from ._pipegrid import Error, InfeasibleError, InputError, InternalError

__all__ = [
    "Error", "InputError", "InfeasibleError", "InternalError",
    "Simulation", "Timeline", "simulate", "explore", "plan", "sweep", "read_sweep",
    "simulate_keywords", "explore_keywords", "plan_keywords", "sweep_keywords",
    "export_chakra", "import_trace", "Measurement",
]

#: The columns of a timeline's rows (render/timeline_csv.hpp), and the type
#: of each value.
TIMELINE_COLUMNS = ("host", "stream", "stage", "action", "micro_batch", "mini_batch",
                    "start_s", "end_s", "bytes", "peer", "memory_bytes")
_INTEGER_COLUMNS = {"stream", "stage", "micro_batch", "mini_batch"}
_REAL_COLUMNS = {"start_s", "end_s", "bytes", "memory_bytes"}


def _typed_cell(column, text):
    if column in _INTEGER_COLUMNS:
        return int(text) if text != "" else None
    if column in _REAL_COLUMNS:
        return float(text) if text != "" else None
    return text


class Timeline:
    """A simulated timeline: one record per action (compute, transfer, ...).

    ``rows`` is a list of dicts with the CSV's columns (TIMELINE_COLUMNS;
    stream, stage, micro_batch and mini_batch as int, times and bytes as
    float, an empty cell as None); ``hosts`` every device in platform order
    (idle ones too: the CSV's "# hosts:" line);
    ``to_csv()`` is the text ``pipegrid simulate --csv`` writes, ``svg()``
    the chart ``--svg`` draws (Jupyter shows it inline: ``_repr_svg_``), and
    ``to_pandas()`` the rows as a pandas DataFrame.
    """

    def __init__(self, run):
        self._run = run
        self._csv = None
        self._rows = None
        self._hosts = None
        self._svg = None

    def to_csv(self):
        """The timeline as CSV, byte for byte what ``simulate --csv`` writes."""
        if self._csv is None:
            self._csv = self._run.timeline_csv()
        return self._csv

    def _read(self):
        lines = self.to_csv().splitlines(keepends=True)
        self._hosts = []
        while lines and lines[0].startswith("#"):
            comment = lines.pop(0)
            if comment.startswith("# hosts:"):
                self._hosts = comment[len("# hosts:"):].split()
        reader = _csv.DictReader(_io.StringIO("".join(lines)))
        self._rows = [{column: _typed_cell(column, row[column]) for column in reader.fieldnames} for row in reader]

    @property
    def rows(self):
        if self._rows is None:
            self._read()
        return self._rows

    @property
    def hosts(self):
        if self._hosts is None:
            self._read()
        return self._hosts

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def svg(self):
        """The timeline as an SVG Gantt chart, as ``simulate --svg`` draws it."""
        if self._svg is None:
            self._svg = self._run.timeline_svg()
        return self._svg

    def _repr_svg_(self):
        return self.svg()

    def to_pandas(self):
        """The rows as a pandas DataFrame (columns in the CSV's order)."""
        try:
            import pandas
        except ImportError as error:
            raise ImportError("pipegrid: Timeline.to_pandas() needs pandas (pip install pandas, or Debian's "
                              "python3-pandas); Timeline.rows holds the same data as a list of dicts") from error
        return pandas.DataFrame(self.rows, columns=list(TIMELINE_COLUMNS))

    def __repr__(self):
        return f"<pipegrid.Timeline: {len(self.rows)} records>"


class Simulation:
    """What ``simulate`` returns.

    ``metrics``: the dict ``pipegrid simulate --json`` prints (same keys,
    same values); ``timeline``: a Timeline; ``plan``: the plan as
    ``--save-plan`` writes it (a dict); ``warnings``: the run's warnings (the
    CLI prints them on stderr). In Jupyter it shows as its timeline.
    """

    def __init__(self, run):
        self._run = run
        self.metrics = _json.loads(run.metrics_json())
        self.timeline = Timeline(run)
        self.warnings = list(run.warnings)
        self._plan = None

    @property
    def plan(self):
        if self._plan is None:
            self._plan = _json.loads(self._run.plan_json())
        return self._plan

    def to_json(self):
        """The metrics as ``pipegrid simulate --json`` prints them (the text)."""
        return self._run.metrics_json()

    def _repr_svg_(self):
        return self.timeline.svg()

    def __repr__(self):
        keys = ("schedule", "minibatch_time_s", "throughput_samples_per_s", "bubble_fraction")
        shown = ", ".join(f"{key}={self.metrics[key]!r}" for key in keys if key in self.metrics)
        return f"<pipegrid.Simulation {shown}>"


def simulate(**options):
    """Simulates a run; the keywords are simulate's flags ('-' -> '_').

    platform=..., then profile=... or model=... (or megatron_args=...),
    schedule=... (or program=...), micro_batches=... for flushed schedules,
    and any other flag of ``pipegrid simulate`` (simulate_keywords()).
    Returns a Simulation. Raises pipegrid.Error's classes.
    """
    return Simulation(_pipegrid.simulate(options))


def simulate_keywords():
    """simulate's keywords (the sweep parameters of a simulate experiment)."""
    return list(_pipegrid.simulate_keywords())


def explore_keywords():
    return list(_pipegrid.command_keywords("explore"))


def plan_keywords():
    return list(_pipegrid.command_keywords("plan"))


def sweep_keywords():
    return list(_pipegrid.command_keywords("sweep"))


def explore(**options):
    """BaPipe's exploration (``pipegrid explore --json``): the keywords are its
    flags ('-' -> '_'; schedules=[...] etc. take lists). Returns the JSON
    object it prints, as a dict (no "winner" when no candidate fits)."""
    _status, out = _pipegrid.run_command("explore", [], options, ["--json"])
    return _json.loads(out)


def plan(**options):
    """Which Megatron-LM layout to run (``pipegrid plan``): the keywords are
    its flags ('-' -> '_'). Returns the JSON ``--output-json`` writes, as a
    dict (its "ranking", fastest fitting layout first)."""
    with _tempfile.TemporaryDirectory(prefix="pipegrid-plan-") as folder:
        path = _os.path.join(folder, "plan.json")
        _pipegrid.run_command("plan", [], options, ["--output-json", path])
        with open(path, encoding="utf-8") as file:
            return _json.load(file)


def _typed(text):
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_sweep(out):
    """A sweep's results folder: {"runs": runs.csv's rows, "devices":
    devices.csv's rows}, each row a dict by column; empty cells are None, and
    cells that read as an int or a float are one."""
    result = {}
    for name in ("runs", "devices"):
        with open(_os.path.join(_os.fspath(out), f"{name}.csv"), newline="", encoding="utf-8") as file:
            result[name] = [{key: _typed(value) for key, value in row.items()} for row in _csv.DictReader(file)]
    return result


def sweep(experiment, out, **options):
    """Runs an experiment file (``pipegrid sweep run EXPERIMENT --out OUT``;
    the keywords are its flags: jobs, set=[...], where, shard, timeout,
    retry_failed, fresh). Returns read_sweep(out) plus "exit_status" (0:
    every run has a row; 1: a run ended error, crashed or timeout) and
    "summary" (what the command prints)."""
    status, out_text = _pipegrid.run_command("sweep", [_os.fspath(experiment)],
                                            dict(options, out=_os.fspath(out)), [])
    result = read_sweep(out)
    result["exit_status"] = status
    result["summary"] = out_text
    return result


def export_chakra(out, **options):
    """Simulates the run simulate's keywords describe and writes it as
    MLCommons Chakra execution traces (``pipegrid export --format chakra
    --out OUT``; docs/chakra.md): ``OUT.<rank>.et`` per platform host and
    ``OUT.json``, the communicator groups. Returns the files written, rank
    files first, in rank order."""
    out = _os.fspath(out)
    _pipegrid.run_command("export", [], options, ["--out", out, "--format", "chakra"])
    files = []
    while _os.path.exists(f"{out}.{len(files)}.et"):
        files.append(f"{out}.{len(files)}.et")
    return files + [f"{out}.json"]


class _MeasuredRun:
    def __init__(self, csv_text, title):
        self._csv, self._title = csv_text, title

    def timeline_csv(self):
        return self._csv

    def timeline_svg(self):
        return _pipegrid.timeline_csv_to_svg(self._csv, self._title)


class Measurement:
    """A real run read from its PyTorch profiler traces (``import_trace``):
    ``timeline`` (a Timeline of the measured records: rows, to_csv(),
    to_pandas(), svg()), ``profile`` (the calibrated profile, a dict: one
    layer per stage), ``platform_xml`` (the fitted platform), ``program``
    (the Program that ran, in pipegrid's text form) and ``summary`` (what
    ``pipegrid trace import`` prints). ``save(folder)`` writes them as
    measured.csv, profile.json, platform.xml and program.txt, the inputs of
    ``pipegrid validate --program --measured``."""

    def __init__(self, csv_text, profile_text, platform_xml, program, summary):
        self.timeline = Timeline(_MeasuredRun(csv_text, "measured (PyTorch profiler traces)"))
        self.profile = _json.loads(profile_text)
        self._profile_text = profile_text
        self.platform_xml = platform_xml
        self.program = program
        self.summary = summary

    def save(self, folder):
        """Writes measured.csv, profile.json, platform.xml and program.txt
        into ``folder`` (created when missing); returns their paths."""
        folder = _os.fspath(folder)
        _os.makedirs(folder, exist_ok=True)
        contents = {"measured.csv": self.timeline.to_csv(), "profile.json": self._profile_text,
                    "platform.xml": self.platform_xml, "program.txt": self.program}
        paths = {}
        for name, text in contents.items():
            paths[name] = _os.path.join(folder, name)
            with open(paths[name], "w", encoding="utf-8") as file:
                file.write(text)
        return paths

    def _repr_svg_(self):
        return self.timeline.svg()

    def __repr__(self):
        return f"<pipegrid.Measurement {self.summary.splitlines()[0] if self.summary else ''}>"


def import_trace(traces, **options):
    """A real pipeline-parallel run's PyTorch profiler traces, one file per
    rank (``pipegrid trace import``; docs/kineto.md): the keywords are its
    flags ('-' -> '_': micro_batch_size, map). Returns a Measurement."""
    if isinstance(traces, (str, bytes, _os.PathLike)):
        traces = [traces]
    with _tempfile.TemporaryDirectory(prefix="pipegrid-trace-") as folder:
        paths = {name: _os.path.join(folder, name) for name in ("measured.csv", "profile.json", "platform.xml", "program.txt")}
        _status, summary = _pipegrid.run_command(
            "trace", [_os.fspath(trace) for trace in traces], options,
            ["--csv", paths["measured.csv"], "--profile", paths["profile.json"],
             "--platform", paths["platform.xml"], "--program", paths["program.txt"]])
        texts = {}
        for name, path in paths.items():
            with open(path, encoding="utf-8") as file:
                texts[name] = file.read()
    return Measurement(texts["measured.csv"], texts["profile.json"], texts["platform.xml"], texts["program.txt"], summary)

