"""Static catalogs: GPU datasheets and published model architectures."""
from frenzy.catalog.gpus import GpuType, gpu_catalog, get_gpu
from frenzy.catalog.models import ModelArch, load_model, model_catalog

__all__ = ["GpuType", "gpu_catalog", "get_gpu", "ModelArch", "load_model", "model_catalog"]
