"""Campaigns on Ray. The driver side: the campaign that ties everything to the store
(`campaign`), what it plans (`plan`), records (`recording`) and prints (`report`), the
search strategies (`search`), the worker pool (`pool`) with its batch loop and failure
rules (`dispatch`) and its Ray connection (`ray_session`). The worker side: the Ray actor
and its GPU mapping (`actors`), each GPU's trial runner (`runner`) with its checker threads'
work (`checking`), and what a worker is asked and how it accounts its time (`job`)."""
