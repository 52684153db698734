"""The one reader of the host: kernel files (``/proc``, ``/sys``) and files a process names,
read under the root a record was scanned under; the shapes both backends hand over; the backend
selector. The pure-Python backend's twins of the Rust files live in ``fallback/``."""
