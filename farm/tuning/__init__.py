"""Campaigns on Ray: the worker pool (`cluster`), each GPU's trial bench (`worker`), the
search strategies (`search`) and the campaign that ties them to the store (`campaign`)."""
