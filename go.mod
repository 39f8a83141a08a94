module github.com/tandemhq/tandem

go 1.26.8

require github.com/fxamacker/cbor/v2 v2.10.0

require (
	github.com/automerge/automerge-go v0.0.0-20230903201930-b80ce8aadbb9 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
