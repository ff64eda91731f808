import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    SUBMITTED: _ClassVar[JobState]
    PLANNED: _ClassVar[JobState]
    QUEUED: _ClassVar[JobState]
    PLACED: _ClassVar[JobState]
    LAUNCHING: _ClassVar[JobState]
    RUNNING: _ClassVar[JobState]
    SUCCEEDED: _ClassVar[JobState]
    FAILED: _ClassVar[JobState]
    CANCELLED: _ClassVar[JobState]

class GpuHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_HEALTH_UNSPECIFIED: _ClassVar[GpuHealth]
    HEALTHY: _ClassVar[GpuHealth]
    UNHEALTHY: _ClassVar[GpuHealth]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_READY: _ClassVar[NodeState]
    NODE_LOST: _ClassVar[NodeState]
JOB_STATE_UNSPECIFIED: JobState
SUBMITTED: JobState
PLANNED: JobState
QUEUED: JobState
PLACED: JobState
LAUNCHING: JobState
RUNNING: JobState
SUCCEEDED: JobState
FAILED: JobState
CANCELLED: JobState
GPU_HEALTH_UNSPECIFIED: GpuHealth
HEALTHY: GpuHealth
UNHEALTHY: GpuHealth
NODE_STATE_UNSPECIFIED: NodeState
NODE_READY: NodeState
NODE_LOST: NodeState

class JobSpec(_message.Message):
    __slots__ = ("name", "model", "training", "constraints", "entrypoint", "env", "model_config_json")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    model: str
    training: TrainingConfig
    constraints: Constraints
    entrypoint: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    model_config_json: str
    def __init__(self, name: _Optional[str] = ..., model: _Optional[str] = ..., training: _Optional[_Union[TrainingConfig, _Mapping]] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., entrypoint: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., model_config_json: _Optional[str] = ...) -> None: ...

class TrainingConfig(_message.Message):
    __slots__ = ("seq_len", "global_batch_size", "tokens", "steps", "precision", "optimizer", "grad_dtype", "attention", "dropout", "framework", "checkpoint_every_steps", "checkpoint_every_s", "checkpoint_keep", "checkpoint_uri", "keep_checkpoints")
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    GRAD_DTYPE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_KEEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    seq_len: int
    global_batch_size: int
    tokens: int
    steps: int
    precision: str
    optimizer: str
    grad_dtype: str
    attention: str
    dropout: float
    framework: str
    checkpoint_every_steps: int
    checkpoint_every_s: float
    checkpoint_keep: int
    checkpoint_uri: str
    keep_checkpoints: bool
    def __init__(self, seq_len: _Optional[int] = ..., global_batch_size: _Optional[int] = ..., tokens: _Optional[int] = ..., steps: _Optional[int] = ..., precision: _Optional[str] = ..., optimizer: _Optional[str] = ..., grad_dtype: _Optional[str] = ..., attention: _Optional[str] = ..., dropout: _Optional[float] = ..., framework: _Optional[str] = ..., checkpoint_every_steps: _Optional[int] = ..., checkpoint_every_s: _Optional[float] = ..., checkpoint_keep: _Optional[int] = ..., checkpoint_uri: _Optional[str] = ..., keep_checkpoints: _Optional[bool] = ...) -> None: ...

class Constraints(_message.Message):
    __slots__ = ("gpu_types", "max_gpus", "deadline", "min_gpus", "pinned")
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    max_gpus: int
    deadline: _timestamp_pb2.Timestamp
    min_gpus: int
    pinned: bool
    def __init__(self, gpu_types: _Optional[_Iterable[str]] = ..., max_gpus: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., min_gpus: _Optional[int] = ..., pinned: _Optional[bool] = ...) -> None: ...

class ParallelPlan(_message.Message):
    __slots__ = ("dp", "tp", "pp", "zero", "micro_batch", "recompute", "sequence_parallel", "cp", "ep")
    DP_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    ZERO_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    dp: int
    tp: int
    pp: int
    zero: int
    micro_batch: int
    recompute: str
    sequence_parallel: bool
    cp: int
    ep: int
    def __init__(self, dp: _Optional[int] = ..., tp: _Optional[int] = ..., pp: _Optional[int] = ..., zero: _Optional[int] = ..., micro_batch: _Optional[int] = ..., recompute: _Optional[str] = ..., sequence_parallel: _Optional[bool] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ...) -> None: ...

class PlanOption(_message.Message):
    __slots__ = ("gpu_type", "num_gpus", "plan", "peak_bytes_per_gpu", "step_time_s", "duration_s", "rank", "peak_allocated_bytes", "peak_reserved_bytes", "memory_margin")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PEAK_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MARGIN_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    num_gpus: int
    plan: ParallelPlan
    peak_bytes_per_gpu: int
    step_time_s: float
    duration_s: float
    rank: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    memory_margin: float
    def __init__(self, gpu_type: _Optional[str] = ..., num_gpus: _Optional[int] = ..., plan: _Optional[_Union[ParallelPlan, _Mapping]] = ..., peak_bytes_per_gpu: _Optional[int] = ..., step_time_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., rank: _Optional[int] = ..., peak_allocated_bytes: _Optional[int] = ..., peak_reserved_bytes: _Optional[int] = ..., memory_margin: _Optional[float] = ...) -> None: ...

class DecisionRecord(_message.Message):
    __slots__ = ("policy", "chosen", "alternatives", "reason", "decided_at", "decision_time_s")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    policy: str
    chosen: PlanOption
    alternatives: _containers.RepeatedCompositeFieldContainer[DecisionAlternative]
    reason: str
    decided_at: _timestamp_pb2.Timestamp
    decision_time_s: float
    def __init__(self, policy: _Optional[str] = ..., chosen: _Optional[_Union[PlanOption, _Mapping]] = ..., alternatives: _Optional[_Iterable[_Union[DecisionAlternative, _Mapping]]] = ..., reason: _Optional[str] = ..., decided_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decision_time_s: _Optional[float] = ...) -> None: ...

class DecisionAlternative(_message.Message):
    __slots__ = ("option", "estimated_start_s", "estimated_completion_s", "verdict")
    OPTION_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_START_S_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COMPLETION_S_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    option: PlanOption
    estimated_start_s: float
    estimated_completion_s: float
    verdict: str
    def __init__(self, option: _Optional[_Union[PlanOption, _Mapping]] = ..., estimated_start_s: _Optional[float] = ..., estimated_completion_s: _Optional[float] = ..., verdict: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("step", "steps", "tokens", "loss", "peak_memory_bytes", "fraction", "checkpoint_write_s")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_WRITE_S_FIELD_NUMBER: _ClassVar[int]
    step: int
    steps: int
    tokens: int
    loss: float
    peak_memory_bytes: int
    fraction: float
    checkpoint_write_s: float
    def __init__(self, step: _Optional[int] = ..., steps: _Optional[int] = ..., tokens: _Optional[int] = ..., loss: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., fraction: _Optional[float] = ..., checkpoint_write_s: _Optional[float] = ...) -> None: ...

class GpuAssignment(_message.Message):
    __slots__ = ("node_id", "gpu_indices")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node_id: _Optional[str] = ..., gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "state", "reason", "attempt", "option", "assignments", "progress", "submitted_at", "placed_at", "started_at", "finished_at", "exit_code", "version", "checkpoint_step", "resumed_from_step", "decision", "tenant", "reshaping", "reshaped_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OPTION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    PLACED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RESHAPING_FIELD_NUMBER: _ClassVar[int]
    RESHAPED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: JobSpec
    state: JobState
    reason: str
    attempt: int
    option: PlanOption
    assignments: _containers.RepeatedCompositeFieldContainer[GpuAssignment]
    progress: Progress
    submitted_at: _timestamp_pb2.Timestamp
    placed_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    exit_code: int
    version: int
    checkpoint_step: int
    resumed_from_step: int
    decision: DecisionRecord
    tenant: str
    reshaping: bool
    reshaped_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ..., attempt: _Optional[int] = ..., option: _Optional[_Union[PlanOption, _Mapping]] = ..., assignments: _Optional[_Iterable[_Union[GpuAssignment, _Mapping]]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., placed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., version: _Optional[int] = ..., checkpoint_step: _Optional[int] = ..., resumed_from_step: _Optional[int] = ..., decision: _Optional[_Union[DecisionRecord, _Mapping]] = ..., tenant: _Optional[str] = ..., reshaping: _Optional[bool] = ..., reshaped_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("job_id", "attempt", "rank", "node_id", "offset", "data")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    rank: int
    node_id: str
    offset: int
    data: bytes
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., node_id: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class GpuStatus(_message.Message):
    __slots__ = ("index", "gpu_type", "memory_total_bytes", "memory_used_bytes", "health", "job_id")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    index: int
    gpu_type: str
    memory_total_bytes: int
    memory_used_bytes: int
    health: GpuHealth
    job_id: str
    def __init__(self, index: _Optional[int] = ..., gpu_type: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., health: _Optional[_Union[GpuHealth, str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "gpu_type", "gpus_total", "gpus_free", "state", "agent_pid", "host", "gpus", "running_jobs", "last_heartbeat", "agent_restarts")
    ID_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GPUS_FREE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    AGENT_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    gpu_type: str
    gpus_total: int
    gpus_free: int
    state: NodeState
    agent_pid: int
    host: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuStatus]
    running_jobs: _containers.RepeatedScalarFieldContainer[str]
    last_heartbeat: _timestamp_pb2.Timestamp
    agent_restarts: int
    def __init__(self, id: _Optional[str] = ..., gpu_type: _Optional[str] = ..., gpus_total: _Optional[int] = ..., gpus_free: _Optional[int] = ..., state: _Optional[_Union[NodeState, str]] = ..., agent_pid: _Optional[int] = ..., host: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuStatus, _Mapping]]] = ..., running_jobs: _Optional[_Iterable[str]] = ..., last_heartbeat: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent_restarts: _Optional[int] = ...) -> None: ...
