// Package replicate is the replication engine: it materializes the
// SpecStar event stream into sinks. A Worker runs one sink's durable
// JetStream consumer: it fetches events in batches, applies them in
// parallel (one resource's events in stream order), makes the sink
// durable, acks, retries transient failures with backoff, dead-letters
// events the sink can never apply with their reasons, and refuses to skip
// events retention removed before the sink saw them. Status, the
// dead-letter listing and replay, and the Prometheus metrics are the
// operator's view of the same consumers.
package replicate
