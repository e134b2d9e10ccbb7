"""Input pipelines: `lx.data.DeviceLoader` puts a host loader's batches on the device,
uploading the next ones in background threads while the step runs (docs/data.md)."""
import atexit

from .loader import DeviceIterator, DeviceLoader
from .pipeline import close_all

# Before the runtime's own exit handler (atexit runs handlers last-registered first):
# a loader thread inside a JAX call while the backend is torn down could abort the process.
atexit.register(close_all)

__all__ = ["DeviceLoader", "DeviceIterator"]
