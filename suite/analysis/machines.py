"""The same cells on several machines: which documents come from which machine, and each cell side by side.

A *machine* is what a results document's ``environment`` names, by the rule
that tells two records measured beside each other (:func:`beside`): its GPU
(the card's UUID), else its device (the CPU's model) and host name. Two cards
of one model in hosts of one name (lent machines) are two machines. Documents
of one machine are that machine's history (:func:`ampsuite.analysis.history`); documents
of different machines are compared here, one document per machine: the last
one given for it. Figures come from :func:`ampsuite.analysis.derive`, so a speedup
means what it means everywhere else (against the cell's own run's baseline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from ampsuite.analysis.access import AnyDocument, as_mapping, throughput, workload_id
from ampsuite.analysis.derived import Derived, derive
from ampsuite.contract.wire import Record

__all__ = [
    "Across",
    "beside",
    "cudnn_version",
    "provenance_line",
    "record_machine",
    "CellAcross",
    "Machine",
    "MachineCell",
    "across_machines",
    "group_machines",
    "machine_key",
    "machine_name",
]


def cudnn_version(value: object) -> str:
    """``torch.backends.cudnn.version()`` as cuDNN writes it: 91900 -> ``9.19.0``, 8902 -> ``8.9.2`` (cuDNN 9
    encodes major*10000 + minor*100 + patch, earlier releases major*1000 + ...); anything else as given."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return str(value) if value not in (None, "") else "\u2014"
    major, rest = divmod(value, 10000 if value >= 90000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def provenance_line(doc: AnyDocument) -> str:
    """What measured a document's figures, in one line (every report page's, tune.md's): ``NVIDIA H200 · driver
    580.159.04 · CUDA 13.0 (driver supports 13.0) · PyTorch 2.11.0+cu130 · cuDNN 9.19.0``."""
    env = as_mapping(doc.get("environment"))
    gpu, dash = env.get("gpu"), "\u2014"
    if isinstance(gpu, Mapping) and gpu.get("name"):
        count = gpu.get("count", 1)
        parts = [
            f"{gpu.get('name')}" + (f" \u00d7 {count}" if isinstance(count, int) and count > 1 else ""),
            f"driver {env.get('driver') or dash}",
            f"CUDA {env.get('torch_cuda') or dash} (driver supports {env.get('cuda_driver') or dash})",
        ]
    else:
        parts = [f"{env.get('cpu') or 'CPU'} (no GPU)"]
    parts.append(f"PyTorch {env.get('torch') or dash}")
    if isinstance(gpu, Mapping):
        parts.append(f"cuDNN {cudnn_version(env.get('cudnn'))}")
    return " \u00b7 ".join(parts)


def _identity(gpu_uuid: object, device: object, host: object) -> tuple[str, ...]:
    """A machine's identity: the GPU's UUID where there is one (the card, whatever host it sits in), else the device
    and the host."""
    if gpu_uuid:
        return ("gpu", str(gpu_uuid))
    return ("host", str(device or ""), str(host or ""))


def record_machine(record: Mapping[str, object]) -> tuple[str, ...] | None:
    """The machine a record names (``record["machine"]``): its GPU's UUID where it has one, else its device and
    host; None for a record that names none (files written before records named their machine)."""
    machine = as_mapping(record.get("machine"))
    if not machine:
        return None
    return _identity(machine.get("gpu_uuid"), machine.get("device"), machine.get("host"))


def beside(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two records were measured beside each other: on one machine, which both name.

    The one rule wherever figures are held against each other: ``ampsuite tune`` reuses a record of its results
    file only beside the machine it runs on, :func:`ampsuite.analysis.compare` says when two records were not,
    and the report groups results files into machines by the same identity (:func:`machine_key`). Lent GPUs of
    one model run one cell several percent apart (H200s: a ResNet-50 recipe 6,758 to 7,139 img/s; H100s: a TF32
    GEMM 2.68 and 3.01 ms), more than most gains a technique brings.
    """
    mine = record_machine(a)
    return mine is not None and mine == record_machine(b)


def machine_key(doc: AnyDocument) -> tuple[str, ...]:
    """The machine that measured a document, as :func:`record_machine` names a record's: the GPU's UUID where its
    environment has one, else the device and the host."""
    device, host = _device_host(doc)
    return _identity(as_mapping(as_mapping(doc.get("environment")).get("gpu")).get("uuid"), device, host)


def _device_host(doc: AnyDocument) -> tuple[str, str]:
    """The GPU's name, else the CPU's model (else "CPU"), and the host name."""
    env = as_mapping(doc.get("environment"))
    gpu = as_mapping(env.get("gpu"))
    device = gpu.get("name") or env.get("cpu") or "CPU"
    return str(device), str(env.get("hostname") or "")


def machine_name(doc: AnyDocument) -> str:
    """``NVIDIA H200 on gpu-node-07``; the device alone where the host name is unknown."""
    device, host = _device_host(doc)
    return f"{device} on {host}" if host else device


@dataclass(frozen=True)
class Machine:
    """One machine of the documents given: its name and which documents (indices, in the order given) it ran."""

    key: tuple[str, ...]
    """:func:`machine_key`."""
    label: str
    """:func:`machine_name`; where two machines would read alike, with the GPU's UUID (its first group) added, else
    the file name."""
    docs: tuple[int, ...]
    device: str
    host: str

    @property
    def compared(self) -> int:
        """The document compared with the other machines: the last one given for this machine."""
        return self.docs[-1]


def group_machines(docs: Sequence[AnyDocument], files: Sequence[str | PurePath] = ()) -> list[Machine]:
    """The machines of ``docs`` in order of first appearance (so the first document's machine comes first)."""
    order: dict[tuple[str, ...], list[int]] = {}
    for i, doc in enumerate(docs):
        order.setdefault(machine_key(doc), []).append(i)
    names = {key: machine_name(docs[ids[0]]) for key, ids in order.items()}
    clash = {n for n in names.values() if list(names.values()).count(n) > 1}
    # A card's UUID begins GPU-36d3c1f6: enough to tell two cards apart; a machine without one goes by its file.
    labels = {key: names[key] + (f" ({key[1][:12]})" if key[0] == "gpu" else "") for key in order}
    out = []
    for key, ids in order.items():
        label, last = names[key], ids[-1]
        if label in clash:
            unique = key[0] == "gpu" and list(labels.values()).count(labels[key]) == 1
            label = (
                labels[key]
                if unique
                else label + (f" ({PurePath(files[last]).name})" if last < len(files) else f" (file {last + 1})")
            )
        out.append(Machine(key, label, tuple(ids), *_device_host(docs[ids[0]])))
    return out


@dataclass(frozen=True)
class MachineCell:
    """One cell on one machine, with the derived figures of its own run (None where there is no figure)."""

    record: Record
    derived: Derived
    throughput: float | None
    ratio_to_first: float | None
    """This machine's throughput over the first machine's for the same cell."""

    @property
    def status(self) -> str:
        return str(self.record.get("status"))

    @property
    def peak_memory_bytes(self) -> int | float | None:
        value = as_mapping(self.record.get("metrics")).get("peak_memory_bytes")
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CellAcross:
    """One cell id on every machine: an entry per machine, None where that machine's run has no such cell."""

    id: str
    workload: str
    unit: str
    entries: list[MachineCell | None]


@dataclass(frozen=True)
class Across:
    """The comparison: machines, and each cell present on at least two of them."""

    machines: list[Machine]
    cells: list[CellAcross]
    only_one: list[tuple[str, int]]
    """Cells on one machine only: (cell id, machine index)."""


def across_machines(docs: Sequence[AnyDocument], files: Sequence[str | PurePath] = ()) -> Across:
    """Each cell id found on at least two machines, per machine, in the order cells first appear.

    Each machine contributes its last document (:attr:`Machine.compared`). A cell
    that did not pass is still an entry (its status and evidence are the point);
    its throughput is None, and so is a ratio whose either side has none.
    """
    machines = group_machines(docs, files)
    compared = [docs[m.compared] for m in machines]
    records: list[dict[str, Record]] = [{str(r["id"]): r for r in doc["cells"]} for doc in compared]
    derived: list[Mapping[str, Derived]] = [derive(doc) for doc in compared]
    ids: dict[str, list[int]] = {}
    for index, by_id in enumerate(records):
        for cell_id in by_id:
            ids.setdefault(cell_id, []).append(index)
    cells: list[CellAcross] = []
    only_one: list[tuple[str, int]] = []
    for cell_id, present in ids.items():
        if len(present) < 2:
            only_one.append((cell_id, present[0]))
            continue
        first = records[0].get(cell_id)
        first_value = throughput(first) if first is not None else None
        entries: list[MachineCell | None] = []
        for index, by_id in enumerate(records):
            record = by_id.get(cell_id)
            if record is None:
                entries.append(None)
                continue
            value = throughput(record)
            ratio = value / first_value if value is not None and first_value else None
            entries.append(MachineCell(record, derived[index][cell_id], value, ratio))
        some = records[present[0]][cell_id]
        unit = str(as_mapping(some.get("workload")).get("unit") or "samples")
        cells.append(CellAcross(cell_id, workload_id(some), unit, entries))
    return Across(machines, cells, only_one)
