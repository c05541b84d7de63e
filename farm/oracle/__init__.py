"""Proving a schedule correct: a launch's buffers wired and run (`launch`), its outputs
compared with the numpy reference (`compare`), kernels certified in bulk (`certify`)."""
