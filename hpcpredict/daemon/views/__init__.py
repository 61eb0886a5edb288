"""Read-only views of the daemon's store: the admin's pages and reports (`pages`), why a job got
its prediction (`explain`), the HTTP API's store reads run in worker processes (`queries`), the
site summary, the Prometheus text (`metrics`). They read the core; nothing in the core reads them."""
