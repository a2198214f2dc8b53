"""Serving: the task pipelines behind HTTP, dynamic batching, the FastAPI app (`bertfam serve`)."""
from ..tasks.pipelines import InputError  # noqa: F401
from .service import Limits, Service  # noqa: F401


def __getattr__(name: str):
    """`create_app` (bertfam/serving/app.py) is imported on first use: fastapi is the [serve] extra."""
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
