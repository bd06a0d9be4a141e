"""The operators' status dashboard (HTTP, HTML and JSON) over the job
service's shards. Nothing lives here yet: it arrives with the dashboard
issue (see ../shared/DESIGN.md)."""
