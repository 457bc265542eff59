"""Kubernetes integration without API access: node labels through Node Feature Discovery's local feature files
(:mod:`nodeagent.k8s.labels`) and the DaemonSet's long-running entrypoint (:mod:`nodeagent.k8s.run`)."""
