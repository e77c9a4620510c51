// Package s3 is the sink backend for SpecStar's S3 resource and blob
// stores (the revisions and blobs of a Postgres+S3 deployment): it writes,
// reads back, walks, lists and purges them, and parses the s3:// URLs
// that name a store (ParseURL, ParseBlobURL) and a sink (ParseSpec).
package s3
