// Consumer module that pins the CNCF distribution registry: the OCI registry the tests publish
// to and follow (docs/oci.md).
module driftbus.local/tools/registry

go 1.26.0

require (
	github.com/distribution/distribution/v3 v3.1.2 // indirect
	github.com/distribution/reference v0.6.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
