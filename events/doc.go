// Package events is the record model of SpecStar storage and its exact
// bytes: RevisionInfo, ResourceMeta, RawResource, Binary and the
// DumpRecord types, with msgpack and JSON codecs that write what
// msgspec writes (so stores and archives stay byte-compatible with
// SpecStar's), and the mapping of a record onto a JetStream message
// (subject, headers, message id).
package events
