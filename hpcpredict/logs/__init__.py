"""Workload logs: the SWF reader and writer (`swf`, and `swf_table`, its columnar fast path),
the cleaning rules (`cleaning`), a log ready to replay (`workload`) and its jobs as columns
(`job_table`). Below everything that predicts or simulates: it knows jobs, not schedulers."""
