"""Serving: the task pipelines behind HTTP, dynamic batching, the FastAPI app (`bertfam serve`)."""
from ..tasks.pipelines import InputError  # noqa: F401
from .service import Limits, Service  # noqa: F401


def create_app(service):
    """The FastAPI app for a Service (imported lazily: fastapi is the [serve] extra)."""
    from .app import create_app as _create

    return _create(service)
