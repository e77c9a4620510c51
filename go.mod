module github.com/specstar/replicator

go 1.26.0

require github.com/vmihailenco/msgpack/v5 v5.4.1

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
