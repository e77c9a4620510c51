package sink

import (
	"fmt"
	"strings"

	"github.com/specstar/replicator/events"
)

// maxSegment is the longest file name Linux file systems accept (NAME_MAX).
const maxSegment = 255

// metaSuffix is what DiskMetaStore appends to a resource id.
const metaSuffix = ".data"

// blobsDir is where DiskBlobStore keeps blobs, beside the model directories;
// a model of that name would collide with it.
const blobsDir = "_blobs"

// tmpPrefix starts every temporary name the sink creates. SpecStar never
// lists a directory where such a name could be mistaken for one of its own:
// meta files are found by the ".data" suffix, schema-version entries by the
// "no_ver"/"v_" prefixes, store and blob files by exact name.
const tmpPrefix = ".tmp-"

// segment checks that s can be used as one path segment below the sink
// root: not empty, not "." or "..", no "/" (so neither absolute nor able to
// climb), no NUL, at most max bytes. kind and raw name the identifier in the
// error (raw is the identifier as given, which may differ from s when s is
// derived from it).
func segment(kind, raw, s string, max int) error {
	key := fmt.Sprintf("%s %q", kind, raw)
	switch {
	case s == "":
		return invalid(key, "empty")
	case s == "." || s == "..":
		return invalid(key, "is a relative path component")
	case strings.HasPrefix(s, "/"):
		return invalid(key, "is an absolute path")
	case strings.Contains(s, "/"):
		return invalid(key, `contains "/"`)
	case strings.IndexByte(s, 0) >= 0:
		return invalid(key, "contains NUL")
	case len(s) > max:
		return invalidf(key, "%d bytes, longer than a file name may be (%d)", len(s), max)
	}
	return nil
}

// checkModel validates a model name: it becomes {root}/{model}.
func checkModel(model string) error {
	if err := segment("model", model, model, maxSegment); err != nil {
		return err
	}
	if model == blobsDir {
		return invalid(fmt.Sprintf("model %q", model), "collides with the blob store directory")
	}
	return nil
}

// checkResourceID validates a resource id: it becomes
// {model}/data/resource/{resource_id} and {model}/meta/{resource_id}.data.
func checkResourceID(id string) error {
	return segment("resource_id", id, id, maxSegment-len(metaSuffix))
}

// checkRevisionID validates a revision id: it becomes a directory below the
// resource's.
func checkRevisionID(id string) error {
	return segment("revision_id", id, id, maxSegment)
}

// schemaDir is DiskResourceStore's p_schema_version: "no_ver" for None,
// "v_" + version otherwise. UNSET is read as None, the field's default.
func schemaDir(sv optString) string {
	if !sv.IsSet() {
		return "no_ver"
	}
	return "v_" + sv.Value
}

// checkSchemaVersion validates the schema_version through the directory
// name it becomes. The "v_" prefix already makes "", "." and ".." safe
// names ("v_", "v_.", "v_..", which SpecStar itself writes), so what is
// refused is what would split or end the name: "/", NUL, excess length.
func checkSchemaVersion(sv optString) error {
	if !sv.IsSet() {
		return nil
	}
	return segment("schema_version", sv.Value, schemaDir(sv), maxSegment)
}

// checkUID validates a revision uid: it must be a canonical UUID, the
// 36-char lowercase hyphenated form str(uuid4()) gives, since it becomes
// store/{uid} and the content of index entries.
func checkUID(uid string) error {
	if uid == "" {
		return invalid(`uid ""`, "revision info has no uid")
	}
	if !canonicalUUID(uid) {
		return invalid(fmt.Sprintf("uid %q", uid), "not a canonical (lowercase, hyphenated) UUID")
	}
	return nil
}

func canonicalUUID(s string) bool {
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

// blobName is DiskBlobStore's file name for a file_id: "/" and ".." each
// become "_".
func blobName(fileID string) string {
	return strings.ReplaceAll(strings.ReplaceAll(fileID, "/", "_"), "..", "_")
}

// checkFileID validates a file_id through the file name it becomes, so any
// string is accepted that is a safe name after SpecStar's mapping.
func checkFileID(fileID string) (string, error) {
	name := blobName(fileID)
	if err := segment("file_id", fileID, name, maxSegment); err != nil {
		return "", err
	}
	return name, nil
}

// checkRevisionKey checks the identifiers that place one revision in a
// resource store (disk or S3): model, resource_id, revision_id and
// schema_version, in that order.
func checkRevisionKey(model, resourceID, revisionID string, schemaVersion events.Opt[string]) error {
	if err := checkModel(model); err != nil {
		return err
	}
	if err := checkResourceID(resourceID); err != nil {
		return err
	}
	if err := checkRevisionID(revisionID); err != nil {
		return err
	}
	return checkSchemaVersion(schemaVersion)
}

// checkRevisionInfo is checkRevisionKey for a revision to store, plus its
// uid (checked after the model, as the stores always did).
func checkRevisionInfo(model string, info *events.RevisionInfo) error {
	if err := checkModel(model); err != nil {
		return err
	}
	if err := checkUID(info.UID); err != nil {
		return err
	}
	return checkRevisionKey(model, info.ResourceID, info.RevisionID, info.SchemaVersion)
}
