"""After the build: the publish gate, the index site, the hosts' stand-ins, the rehearsal and the install checks."""
