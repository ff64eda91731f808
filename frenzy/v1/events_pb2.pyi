import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from frenzy.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReshapeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESHAPE_KIND_UNSPECIFIED: _ClassVar[ReshapeKind]
    RESIZE: _ClassVar[ReshapeKind]
    MIGRATE: _ClassVar[ReshapeKind]
    PREEMPT: _ClassVar[ReshapeKind]

class StatusSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_SOURCE_UNSPECIFIED: _ClassVar[StatusSource]
    ORCHESTRATOR: _ClassVar[StatusSource]
    AGENT: _ClassVar[StatusSource]
RESHAPE_KIND_UNSPECIFIED: ReshapeKind
RESIZE: ReshapeKind
MIGRATE: ReshapeKind
PREEMPT: ReshapeKind
STATUS_SOURCE_UNSPECIFIED: StatusSource
ORCHESTRATOR: StatusSource
AGENT: StatusSource

class Envelope(_message.Message):
    __slots__ = ("event_id", "type", "produced_at", "trace_id", "producer", "job_submitted", "job_planned", "job_placed", "launch_job", "stop_job", "job_status_changed", "node_heartbeat", "gpu_availability_changed", "job_record_state", "state_marker", "orchestrator_epoch", "reshape_job", "agent_join", "delete_checkpoints", "checkpoints_deleted", "held_placements", "log_chunk")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_AT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    JOB_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    JOB_PLANNED_FIELD_NUMBER: _ClassVar[int]
    JOB_PLACED_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_JOB_FIELD_NUMBER: _ClassVar[int]
    STOP_JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_STATUS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    NODE_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    GPU_AVAILABILITY_CHANGED_FIELD_NUMBER: _ClassVar[int]
    JOB_RECORD_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_MARKER_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESHAPE_JOB_FIELD_NUMBER: _ClassVar[int]
    AGENT_JOIN_FIELD_NUMBER: _ClassVar[int]
    DELETE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_DELETED_FIELD_NUMBER: _ClassVar[int]
    HELD_PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    LOG_CHUNK_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    type: str
    produced_at: _timestamp_pb2.Timestamp
    trace_id: str
    producer: str
    job_submitted: JobSubmitted
    job_planned: JobPlanned
    job_placed: JobPlaced
    launch_job: LaunchJob
    stop_job: StopJob
    job_status_changed: JobStatusChanged
    node_heartbeat: NodeHeartbeat
    gpu_availability_changed: GpuAvailabilityChanged
    job_record_state: JobRecordState
    state_marker: StateMarker
    orchestrator_epoch: OrchestratorEpoch
    reshape_job: ReshapeJob
    agent_join: AgentJoin
    delete_checkpoints: DeleteCheckpoints
    checkpoints_deleted: CheckpointsDeleted
    held_placements: HeldPlacements
    log_chunk: _types_pb2.LogChunk
    def __init__(self, event_id: _Optional[str] = ..., type: _Optional[str] = ..., produced_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trace_id: _Optional[str] = ..., producer: _Optional[str] = ..., job_submitted: _Optional[_Union[JobSubmitted, _Mapping]] = ..., job_planned: _Optional[_Union[JobPlanned, _Mapping]] = ..., job_placed: _Optional[_Union[JobPlaced, _Mapping]] = ..., launch_job: _Optional[_Union[LaunchJob, _Mapping]] = ..., stop_job: _Optional[_Union[StopJob, _Mapping]] = ..., job_status_changed: _Optional[_Union[JobStatusChanged, _Mapping]] = ..., node_heartbeat: _Optional[_Union[NodeHeartbeat, _Mapping]] = ..., gpu_availability_changed: _Optional[_Union[GpuAvailabilityChanged, _Mapping]] = ..., job_record_state: _Optional[_Union[JobRecordState, _Mapping]] = ..., state_marker: _Optional[_Union[StateMarker, _Mapping]] = ..., orchestrator_epoch: _Optional[_Union[OrchestratorEpoch, _Mapping]] = ..., reshape_job: _Optional[_Union[ReshapeJob, _Mapping]] = ..., agent_join: _Optional[_Union[AgentJoin, _Mapping]] = ..., delete_checkpoints: _Optional[_Union[DeleteCheckpoints, _Mapping]] = ..., checkpoints_deleted: _Optional[_Union[CheckpointsDeleted, _Mapping]] = ..., held_placements: _Optional[_Union[HeldPlacements, _Mapping]] = ..., log_chunk: _Optional[_Union[_types_pb2.LogChunk, _Mapping]] = ...) -> None: ...

class JobSubmitted(_message.Message):
    __slots__ = ("job_id", "spec", "submitted_at", "attempt", "min_memory_bytes", "tenant")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: _types_pb2.JobSpec
    submitted_at: _timestamp_pb2.Timestamp
    attempt: int
    min_memory_bytes: int
    tenant: str
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., min_memory_bytes: _Optional[int] = ..., tenant: _Optional[str] = ...) -> None: ...

class JobPlanned(_message.Message):
    __slots__ = ("job_id", "options", "reason", "attempt", "submitted_at", "num_params", "deadline", "tenant")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    options: _containers.RepeatedCompositeFieldContainer[_types_pb2.PlanOption]
    reason: str
    attempt: int
    submitted_at: _timestamp_pb2.Timestamp
    num_params: int
    deadline: _timestamp_pb2.Timestamp
    tenant: str
    def __init__(self, job_id: _Optional[str] = ..., options: _Optional[_Iterable[_Union[_types_pb2.PlanOption, _Mapping]]] = ..., reason: _Optional[str] = ..., attempt: _Optional[int] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., num_params: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ...) -> None: ...

class JobPlaced(_message.Message):
    __slots__ = ("job_id", "option", "assignments", "attempt", "placement_id", "decision")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OPTION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    option: _types_pb2.PlanOption
    assignments: _containers.RepeatedCompositeFieldContainer[_types_pb2.GpuAssignment]
    attempt: int
    placement_id: str
    decision: _types_pb2.DecisionRecord
    def __init__(self, job_id: _Optional[str] = ..., option: _Optional[_Union[_types_pb2.PlanOption, _Mapping]] = ..., assignments: _Optional[_Iterable[_Union[_types_pb2.GpuAssignment, _Mapping]]] = ..., attempt: _Optional[int] = ..., placement_id: _Optional[str] = ..., decision: _Optional[_Union[_types_pb2.DecisionRecord, _Mapping]] = ...) -> None: ...

class HeldPlacements(_message.Message):
    __slots__ = ("releasing_job_id", "releasing_attempt", "placements")
    RELEASING_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RELEASING_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    releasing_job_id: str
    releasing_attempt: int
    placements: _containers.RepeatedCompositeFieldContainer[JobPlaced]
    def __init__(self, releasing_job_id: _Optional[str] = ..., releasing_attempt: _Optional[int] = ..., placements: _Optional[_Iterable[_Union[JobPlaced, _Mapping]]] = ...) -> None: ...

class ReshapeJob(_message.Message):
    __slots__ = ("job_id", "kind", "attempt", "option", "assignments", "placement_id", "decision")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OPTION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kind: ReshapeKind
    attempt: int
    option: _types_pb2.PlanOption
    assignments: _containers.RepeatedCompositeFieldContainer[_types_pb2.GpuAssignment]
    placement_id: str
    decision: _types_pb2.DecisionRecord
    def __init__(self, job_id: _Optional[str] = ..., kind: _Optional[_Union[ReshapeKind, str]] = ..., attempt: _Optional[int] = ..., option: _Optional[_Union[_types_pb2.PlanOption, _Mapping]] = ..., assignments: _Optional[_Iterable[_Union[_types_pb2.GpuAssignment, _Mapping]]] = ..., placement_id: _Optional[str] = ..., decision: _Optional[_Union[_types_pb2.DecisionRecord, _Mapping]] = ...) -> None: ...

class LaunchJob(_message.Message):
    __slots__ = ("job_id", "node_id", "attempt", "gpu_indices", "node_rank", "num_nodes", "world_size", "rank_offset", "master_addr", "master_port", "option", "spec", "resume_from_step", "checkpoint_uri")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    OPTION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    attempt: int
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    node_rank: int
    num_nodes: int
    world_size: int
    rank_offset: int
    master_addr: str
    master_port: int
    option: _types_pb2.PlanOption
    spec: _types_pb2.JobSpec
    resume_from_step: int
    checkpoint_uri: str
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., attempt: _Optional[int] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., node_rank: _Optional[int] = ..., num_nodes: _Optional[int] = ..., world_size: _Optional[int] = ..., rank_offset: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., option: _Optional[_Union[_types_pb2.PlanOption, _Mapping]] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., resume_from_step: _Optional[int] = ..., checkpoint_uri: _Optional[str] = ...) -> None: ...

class DeleteCheckpoints(_message.Message):
    __slots__ = ("job_id", "node_id", "checkpoint_uri", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    checkpoint_uri: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., checkpoint_uri: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CheckpointsDeleted(_message.Message):
    __slots__ = ("job_id", "node_id", "checkpoint_uri", "removed", "note")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    checkpoint_uri: str
    removed: int
    note: str
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., checkpoint_uri: _Optional[str] = ..., removed: _Optional[int] = ..., note: _Optional[str] = ...) -> None: ...

class StopJob(_message.Message):
    __slots__ = ("job_id", "node_id", "reason", "attempt", "checkpoint_first")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIRST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    reason: str
    attempt: int
    checkpoint_first: bool
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., reason: _Optional[str] = ..., attempt: _Optional[int] = ..., checkpoint_first: _Optional[bool] = ...) -> None: ...

class JobStatusChanged(_message.Message):
    __slots__ = ("job_id", "state", "reason", "progress", "source", "node_id", "attempt", "exit_code", "job", "checkpoint_step")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: _types_pb2.JobState
    reason: str
    progress: _types_pb2.Progress
    source: StatusSource
    node_id: str
    attempt: int
    exit_code: int
    job: _types_pb2.Job
    checkpoint_step: int
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.JobState, str]] = ..., reason: _Optional[str] = ..., progress: _Optional[_Union[_types_pb2.Progress, _Mapping]] = ..., source: _Optional[_Union[StatusSource, str]] = ..., node_id: _Optional[str] = ..., attempt: _Optional[int] = ..., exit_code: _Optional[int] = ..., job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., checkpoint_step: _Optional[int] = ...) -> None: ...

class NodeHeartbeat(_message.Message):
    __slots__ = ("node_id", "host", "agent_pid", "gpus", "running_jobs", "sequence", "simulated", "agent_restarts", "ended_jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    AGENT_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    ENDED_JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    host: str
    agent_pid: int
    gpus: _containers.RepeatedCompositeFieldContainer[_types_pb2.GpuStatus]
    running_jobs: _containers.RepeatedScalarFieldContainer[str]
    sequence: int
    simulated: bool
    agent_restarts: int
    ended_jobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[str] = ..., host: _Optional[str] = ..., agent_pid: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[_types_pb2.GpuStatus, _Mapping]]] = ..., running_jobs: _Optional[_Iterable[str]] = ..., sequence: _Optional[int] = ..., simulated: _Optional[bool] = ..., agent_restarts: _Optional[int] = ..., ended_jobs: _Optional[_Iterable[str]] = ...) -> None: ...

class GpuAvailabilityChanged(_message.Message):
    __slots__ = ("node_id", "gpu_type", "gpus_total", "free_gpu_indices", "node_state", "version", "cause", "allocated_jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FREE_GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    NODE_STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gpu_type: str
    gpus_total: int
    free_gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    node_state: _types_pb2.NodeState
    version: int
    cause: str
    allocated_jobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[str] = ..., gpu_type: _Optional[str] = ..., gpus_total: _Optional[int] = ..., free_gpu_indices: _Optional[_Iterable[int]] = ..., node_state: _Optional[_Union[_types_pb2.NodeState, str]] = ..., version: _Optional[int] = ..., cause: _Optional[str] = ..., allocated_jobs: _Optional[_Iterable[str]] = ...) -> None: ...

class JobRecordState(_message.Message):
    __slots__ = ("job", "node_outcomes", "oom_replans", "pending_reshape", "free_attempts", "checkpoint_nodes", "cleanup_nodes", "held")
    class NodeOutcomesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _types_pb2.JobState
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_types_pb2.JobState, str]] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    NODE_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    OOM_REPLANS_FIELD_NUMBER: _ClassVar[int]
    PENDING_RESHAPE_FIELD_NUMBER: _ClassVar[int]
    FREE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NODES_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_NODES_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    node_outcomes: _containers.ScalarMap[str, _types_pb2.JobState]
    oom_replans: int
    pending_reshape: ReshapeJob
    free_attempts: int
    checkpoint_nodes: _containers.RepeatedScalarFieldContainer[str]
    cleanup_nodes: _containers.RepeatedScalarFieldContainer[str]
    held: HeldPlacements
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., node_outcomes: _Optional[_Mapping[str, _types_pb2.JobState]] = ..., oom_replans: _Optional[int] = ..., pending_reshape: _Optional[_Union[ReshapeJob, _Mapping]] = ..., free_attempts: _Optional[int] = ..., checkpoint_nodes: _Optional[_Iterable[str]] = ..., cleanup_nodes: _Optional[_Iterable[str]] = ..., held: _Optional[_Union[HeldPlacements, _Mapping]] = ...) -> None: ...

class StateMarker(_message.Message):
    __slots__ = ("marker_id",)
    MARKER_ID_FIELD_NUMBER: _ClassVar[int]
    marker_id: str
    def __init__(self, marker_id: _Optional[str] = ...) -> None: ...

class OrchestratorEpoch(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class AgentJoin(_message.Message):
    __slots__ = ("node_id", "public_key", "join_token_id", "issued_at", "proof")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    public_key: bytes
    join_token_id: str
    issued_at: _timestamp_pb2.Timestamp
    proof: bytes
    def __init__(self, node_id: _Optional[str] = ..., public_key: _Optional[bytes] = ..., join_token_id: _Optional[str] = ..., issued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., proof: _Optional[bytes] = ...) -> None: ...
