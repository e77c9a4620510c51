package store

import (
	"fmt"
	"strings"

	"github.com/specstar/replicator/events"
)

// MaxSegment is the longest file name Linux file systems accept (NAME_MAX).
const MaxSegment = 255

// MetaSuffix is what DiskMetaStore appends to a resource id.
const MetaSuffix = ".data"

// BlobsDir is where DiskBlobStore keeps blobs, beside the model directories;
// a model of that name would collide with it.
const BlobsDir = "_blobs"

// TmpPrefix starts every temporary name the sink creates. SpecStar never
// lists a directory where such a name could be mistaken for one of its own:
// meta files are found by the ".data" suffix, schema-version entries by the
// "no_ver"/"v_" prefixes, store and blob files by exact name.
const TmpPrefix = ".tmp-"

// StagingDir is the directory below a disk sink's root that holds the
// staging directories of writers (temporary files, and the locks that say
// which writer is alive); a model of that name would be swept away.
const StagingDir = ".specstar-tmp"

// Segment checks that s can be used as one path segment below the sink
// root: not empty, not "." or "..", no "/" (so neither absolute nor able to
// climb), no NUL, at most max bytes. kind and raw name the identifier in the
// error (raw is the identifier as given, which may differ from s when s is
// derived from it).
func Segment(kind, raw, s string, max int) error {
	// The key names the identifier only in an error: formatting it for
	// every identifier that passes cost a few percent of a disk mirror.
	// It is quoted bounded: a hostile 20 KiB id would otherwise make a
	// reason of 80 KiB.
	key := func() string { return kind + " " + events.QuoteBounded(raw) }
	switch {
	case s == "":
		return Invalid(key(), "empty")
	case s == "." || s == "..":
		return Invalid(key(), "is a relative path component")
	case strings.HasPrefix(s, "/"):
		return Invalid(key(), "is an absolute path")
	case strings.Contains(s, "/"):
		return Invalid(key(), `contains "/"`)
	case strings.IndexByte(s, 0) >= 0:
		return Invalid(key(), "contains NUL")
	case len(s) > max:
		return Invalidf(key(), "%d bytes, longer than a file name may be (%d)", len(s), max)
	}
	return nil
}

// CheckModel validates a model name: it becomes {root}/{model}. The names
// the sink keeps for itself beside the models are refused: BlobsDir,
// StagingDir, and every name starting with TmpPrefix (the sink's temporary
// names, such as a purge's .tmp-purge-* graveyards).
func CheckModel(model string) error {
	if err := Segment("model", model, model, MaxSegment); err != nil {
		return err
	}
	key := func() string { return "model " + events.QuoteBounded(model) }
	switch {
	case model == BlobsDir:
		return Invalid(key(), "collides with the blob store directory")
	case model == StagingDir:
		return Invalid(key(), "collides with the sink's staging directory")
	case strings.HasPrefix(model, TmpPrefix):
		return Invalidf(key(), "starts with %q, which the sink keeps for its temporary names", TmpPrefix)
	}
	return nil
}

// CheckResourceID validates a resource id: it becomes
// {model}/data/resource/{resource_id} and {model}/meta/{resource_id}.data.
func CheckResourceID(id string) error {
	return Segment("resource_id", id, id, MaxSegment-len(MetaSuffix))
}

// CheckRevisionID validates a revision id: it becomes a directory below the
// resource's.
func CheckRevisionID(id string) error {
	return Segment("revision_id", id, id, MaxSegment)
}

// SchemaDir is DiskResourceStore's p_schema_version: "no_ver" for None,
// "v_" + version otherwise. UNSET is read as None, the field's default.
func SchemaDir(sv OptString) string {
	if !sv.IsSet() {
		return "no_ver"
	}
	return "v_" + sv.Value
}

// CheckSchemaVersion validates the schema_version through the directory
// name it becomes. The "v_" prefix already makes "", "." and ".." safe
// names ("v_", "v_.", "v_..", which SpecStar itself writes), so what is
// refused is what would split or end the name: "/", NUL, excess length.
func CheckSchemaVersion(sv OptString) error {
	if !sv.IsSet() {
		return nil
	}
	return Segment("schema_version", sv.Value, SchemaDir(sv), MaxSegment)
}

// CheckUID validates a revision uid: it must be a canonical UUID, the
// 36-char lowercase hyphenated form str(uuid4()) gives, since it becomes
// store/{uid} and the content of index entries.
func CheckUID(uid string) error {
	if uid == "" {
		return Invalid(`uid ""`, "revision info has no uid")
	}
	if !CanonicalUUID(uid) {
		return Invalid(fmt.Sprintf("uid %q", uid), "not a canonical (lowercase, hyphenated) UUID")
	}
	return nil
}

// CanonicalUUID reports whether s is the lowercase, hyphenated 36-char
// form of a UUID, the only form SpecStar writes and the stores accept.
func CanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// BlobName is DiskBlobStore's file name for a file_id: "/" and ".." each
// become "_".
func BlobName(fileID string) string {
	return strings.ReplaceAll(strings.ReplaceAll(fileID, "/", "_"), "..", "_")
}

// CheckFileID validates a file_id through the file name it becomes, so any
// string is accepted that is a safe name after SpecStar's mapping.
func CheckFileID(fileID string) (string, error) {
	name := BlobName(fileID)
	if err := Segment("file_id", fileID, name, MaxSegment); err != nil {
		return "", err
	}
	return name, nil
}

// CheckRevisionKey checks the identifiers that place one revision in a
// resource store (disk or S3): model, resource_id, revision_id and
// schema_version, in that order.
func CheckRevisionKey(model, resourceID, revisionID string, schemaVersion events.Opt[string]) error {
	if err := CheckModel(model); err != nil {
		return err
	}
	if err := CheckResourceID(resourceID); err != nil {
		return err
	}
	if err := CheckRevisionID(revisionID); err != nil {
		return err
	}
	return CheckSchemaVersion(schemaVersion)
}

// CheckRevisionInfo is CheckRevisionKey for a revision to store, plus its
// uid (checked after the model, as the stores always did).
func CheckRevisionInfo(model string, info *events.RevisionInfo) error {
	if err := CheckModel(model); err != nil {
		return err
	}
	if err := CheckUID(info.UID); err != nil {
		return err
	}
	return CheckRevisionKey(model, info.ResourceID, info.RevisionID, info.SchemaVersion)
}
