"""The operations assistant of ``make demo``: a simulated checkout service whose database pool
is exhausted (:mod:`.world`), the tools that investigate and repair it (:mod:`.tools`), the MCP
runbook server (:mod:`.runbook_server`), the scripted model's story (:mod:`.script`) and the
timeline it is printed as (:mod:`.timeline`)."""
