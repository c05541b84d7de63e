"""Campaigns on Ray. The driver side: the campaign that ties everything to the store
(`campaign`), the tasks it plans (`tasks`), records (`recording`) and prints (`report`), the
search strategies (`search`) and its Ray connection (`ray_session`). The Ray crossing
(`workers`): the WorkerPool with its batch loop and failure rules, and the GpuWorker actor
on each GPU. On the worker: its trial runner (`runner`), the inputs it keeps (`inputs`), and
what a worker is asked and how it accounts its time (`job`)."""
