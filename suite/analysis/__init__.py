"""Layer 5, analysis: figures derived from results documents (pure functions; no torch).

- :mod:`.access`: reading one record (median, throughput, noise), comparable configurations;
- :mod:`.derived`: speedups against FP32/TF32, MFU, memory saving, numerics verdict;
- :mod:`.best`: the best trustworthy cell per workload, and why faster ones were passed over;
- :mod:`.quality`: quality verdicts, each recipe's trained eval loss against its reference's over seeds;
- :mod:`.compare`: one run against another; :mod:`.history`: a cell across commits;
- :mod:`.machines`: the same cells on several machines.

The ``import NAME as NAME`` lines below are the package's exports (PEP 484's explicit re-export form).
"""

from ampsuite.analysis.access import DEFAULT_NOISE_TARGET as DEFAULT_NOISE_TARGET
from ampsuite.analysis.access import DEFAULT_NUMERICS_TOLERANCE as DEFAULT_NUMERICS_TOLERANCE
from ampsuite.analysis.access import FAILURE_STATUSES as FAILURE_STATUSES
from ampsuite.analysis.access import STATUSES as STATUSES
from ampsuite.analysis.access import AnyDocument as AnyDocument
from ampsuite.analysis.access import as_mapping as as_mapping
from ampsuite.analysis.access import cell_label as cell_label
from ampsuite.analysis.access import combination_label as combination_label
from ampsuite.analysis.access import comparable_options as comparable_options
from ampsuite.analysis.access import data_parallel as data_parallel
from ampsuite.analysis.access import group_key as group_key
from ampsuite.analysis.access import instability_warnings as instability_warnings
from ampsuite.analysis.access import is_inference as is_inference
from ampsuite.analysis.access import median_seconds as median_seconds
from ampsuite.analysis.access import nodes as nodes
from ampsuite.analysis.access import noise as noise
from ampsuite.analysis.access import noise_target as noise_target
from ampsuite.analysis.access import numerics_tolerance as numerics_tolerance
from ampsuite.analysis.access import passed as passed
from ampsuite.analysis.access import peak_tflops as peak_tflops
from ampsuite.analysis.access import power_cap_note as power_cap_note
from ampsuite.analysis.access import precision_option as precision_option
from ampsuite.analysis.access import precision_value as precision_value
from ampsuite.analysis.access import status_counts as status_counts
from ampsuite.analysis.access import technique_names as technique_names
from ampsuite.analysis.access import throughput as throughput
from ampsuite.analysis.access import throughput_per_gpu as throughput_per_gpu
from ampsuite.analysis.access import waiting_note as waiting_note
from ampsuite.analysis.access import workload_id as workload_id
from ampsuite.analysis.access import world_size as world_size
from ampsuite.analysis.best import NO_GAIN as NO_GAIN
from ampsuite.analysis.best import Best as Best
from ampsuite.analysis.best import PassedOver as PassedOver
from ampsuite.analysis.best import baseline_lines as baseline_lines
from ampsuite.analysis.best import best_per_workload as best_per_workload
from ampsuite.analysis.best import measure_again as measure_again
from ampsuite.analysis.best import numerics_reason as numerics_reason
from ampsuite.analysis.best import untrusted_reason as untrusted_reason
from ampsuite.analysis.compare import MIN_RELATIVE_CHANGE as MIN_RELATIVE_CHANGE
from ampsuite.analysis.compare import Comparison as Comparison
from ampsuite.analysis.compare import compare as compare
from ampsuite.analysis.compare import regressions as regressions
from ampsuite.analysis.compare import same_run as same_run
from ampsuite.analysis.derived import Derived as Derived
from ampsuite.analysis.derived import derive as derive
from ampsuite.analysis.derived import is_nonfinite as is_nonfinite
from ampsuite.analysis.history import HistoryPoint as HistoryPoint
from ampsuite.analysis.history import history as history
from ampsuite.analysis.machines import Across as Across
from ampsuite.analysis.machines import CellAcross as CellAcross
from ampsuite.analysis.machines import Machine as Machine
from ampsuite.analysis.machines import MachineCell as MachineCell
from ampsuite.analysis.machines import across_machines as across_machines
from ampsuite.analysis.machines import cudnn_version as cudnn_version
from ampsuite.analysis.machines import group_machines as group_machines
from ampsuite.analysis.machines import machine_key as machine_key
from ampsuite.analysis.machines import machine_name as machine_name
from ampsuite.analysis.machines import provenance_line as provenance_line
from ampsuite.analysis.quality import QualityRule as QualityRule
from ampsuite.analysis.quality import QualityVerdict as QualityVerdict
from ampsuite.analysis.quality import quality_lines as quality_lines
from ampsuite.analysis.quality import quality_reason as quality_reason
from ampsuite.analysis.quality import quality_rule as quality_rule
from ampsuite.analysis.quality import quality_summary as quality_summary
from ampsuite.analysis.quality import quality_verdicts as quality_verdicts
from ampsuite.analysis.quality import seeds_of as seeds_of
