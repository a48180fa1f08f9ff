// Consumer module that pins Helm for rendering charts (`driftbus publish --helm`).
module driftbus.local/tools/helm

go 1.26.0

require helm.sh/helm/v4 v4.3.1 // indirect
