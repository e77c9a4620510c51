// Package dedup holds SpecStar's content addresses: the data_hash of a
// revision payload and the file_id of a blob, both XXH3-128, and the checks
// that let sinks make every write idempotent.
package dedup

import (
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	"github.com/zeebo/xxh3"
)

// DataHashPrefix starts every RevisionInfo.data_hash.
const DataHashPrefix = "xxh3_128:"

// Sum128Hex is xxhash.xxh3_128_hexdigest: 32 lowercase hex digits, the
// high 64 bits first.
func Sum128Hex(p []byte) string {
	b := xxh3.Hash128(p).Bytes()
	return hex.EncodeToString(b[:])
}

// DataHash is the data_hash SpecStar records for a stored payload.
func DataHash(payload []byte) string { return DataHashPrefix + Sum128Hex(payload) }

// FileID is the file_id SpecStar gives a blob's bytes.
func FileID(blob []byte) string { return Sum128Hex(blob) }

// NewFileIDHasher streams a large blob; its Sum gives the 16 hash bytes,
// and HexSum the file_id.
func NewFileIDHasher() hash.Hash { return xxh3.New128() }

// HexSum formats a hasher's 128-bit sum as a file_id.
func HexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// ValidFileID reports whether s has the shape of a content-derived file_id.
func ValidFileID(s string) bool { return len(s) == 32 && isLowerHex(s) }

// ValidDataHash reports whether s has the shape of a data_hash.
func ValidDataHash(s string) bool {
	rest, ok := strings.CutPrefix(s, DataHashPrefix)
	return ok && len(rest) == 32 && isLowerHex(rest)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MismatchError says that bytes do not hash to the address they claim.
type MismatchError struct {
	What string // "data_hash" or "file_id"
	Want string // the address recorded
	Got  string // the address of the bytes
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s mismatch: recorded %s, bytes hash to %s", e.What, e.Want, e.Got)
}

// CheckDataHash verifies a payload against a recorded data_hash.
func CheckDataHash(recorded string, payload []byte) error {
	if got := DataHash(payload); got != recorded {
		return &MismatchError{What: "data_hash", Want: recorded, Got: got}
	}
	return nil
}

// CheckBlob verifies a blob against its file_id and declared size.
func CheckBlob(fileID string, size int64, blob []byte) error {
	if int64(len(blob)) != size {
		return fmt.Errorf("blob %s: size is %d but %d bytes are present", fileID, size, len(blob))
	}
	if got := FileID(blob); got != fileID {
		return &MismatchError{What: "file_id", Want: fileID, Got: got}
	}
	return nil
}
