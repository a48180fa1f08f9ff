// Consumer module that pins the ingress-nginx sources for their Helm chart (charts/ingress-nginx):
// the tests render it with the real helm and apply it, hooks and all (tests/integration/test_hooks.py).
// The Go module proxy is where the chart can be fetched here; go.sum pins its content.
module driftbus.local/tools/charts

go 1.26.0

require k8s.io/ingress-nginx v0.0.0-20240708192948-52c50467d67d // indirect
