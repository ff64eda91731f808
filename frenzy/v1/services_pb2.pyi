from frenzy.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "job_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    job_id: str
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states",)
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.JobState]
    def __init__(self, states: _Optional[_Iterable[_Union[_types_pb2.JobState, str]]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_types_pb2.Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StreamLogsRequest(_message.Message):
    __slots__ = ("job_id", "rank", "follow", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    follow: bool
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., follow: _Optional[bool] = ..., attempt: _Optional[int] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("spec", "gpu_types")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., gpu_types: _Optional[_Iterable[str]] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("options", "num_params")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_FIELD_NUMBER: _ClassVar[int]
    options: _containers.RepeatedCompositeFieldContainer[_types_pb2.PlanOption]
    num_params: int
    def __init__(self, options: _Optional[_Iterable[_Union[_types_pb2.PlanOption, _Mapping]]] = ..., num_params: _Optional[int] = ...) -> None: ...

class GetClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GpuTypeSummary(_message.Message):
    __slots__ = ("gpu_type", "total", "free", "allocated", "running_jobs", "queued_jobs", "nodes")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    total: int
    free: int
    allocated: int
    running_jobs: int
    queued_jobs: int
    nodes: int
    def __init__(self, gpu_type: _Optional[str] = ..., total: _Optional[int] = ..., free: _Optional[int] = ..., allocated: _Optional[int] = ..., running_jobs: _Optional[int] = ..., queued_jobs: _Optional[int] = ..., nodes: _Optional[int] = ...) -> None: ...

class ClusterSummary(_message.Message):
    __slots__ = ("gpu_types", "nodes_ready", "nodes_lost", "memory_prediction", "agent_restarts")
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    NODES_READY_FIELD_NUMBER: _ClassVar[int]
    NODES_LOST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PREDICTION_FIELD_NUMBER: _ClassVar[int]
    AGENT_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    gpu_types: _containers.RepeatedCompositeFieldContainer[GpuTypeSummary]
    nodes_ready: int
    nodes_lost: int
    memory_prediction: MemoryPredictionStats
    agent_restarts: int
    def __init__(self, gpu_types: _Optional[_Iterable[_Union[GpuTypeSummary, _Mapping]]] = ..., nodes_ready: _Optional[int] = ..., nodes_lost: _Optional[int] = ..., memory_prediction: _Optional[_Union[MemoryPredictionStats, _Mapping]] = ..., agent_restarts: _Optional[int] = ...) -> None: ...

class MemoryPredictionStats(_message.Message):
    __slots__ = ("jobs", "mean_abs_error", "worst_under_prediction")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABS_ERROR_FIELD_NUMBER: _ClassVar[int]
    WORST_UNDER_PREDICTION_FIELD_NUMBER: _ClassVar[int]
    jobs: int
    mean_abs_error: float
    worst_under_prediction: float
    def __init__(self, jobs: _Optional[int] = ..., mean_abs_error: _Optional[float] = ..., worst_under_prediction: _Optional[float] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_types_pb2.Node, _Mapping]]] = ...) -> None: ...
