package postgres

import (
	"errors"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// PermanentError is a condition of the server or the deployment that
// waiting cannot change (wal_level, a missing privilege, no meta table), so
// a tail stops on it instead of retrying.
type PermanentError struct{ Err error }

// Error is the condition's message.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the condition.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent reports that no retry changes the condition (the commands
// exit 1 on it, as on any input that is not valid).
func (e *PermanentError) Permanent() bool { return true }

// permanentCodes are the SQLSTATEs no retry changes: the server's
// configuration, the user's privileges, the deployment's tables.
var permanentCodes = map[string]bool{
	"55000": true, // object_not_in_prerequisite_state: "logical decoding requires wal_level >= logical"
	"42501": true, // insufficient_privilege: no REPLICATION attribute, no right on a table
	"42P01": true, // undefined_table: a meta table named by models= does not exist
	"42703": true, // undefined_column: not a SpecStar table
	"3D000": true, // invalid_catalog_name: the database does not exist
	"28000": true, // invalid_authorization_specification: pg_hba.conf refuses the (replication) connection
}

// IsPermanent reports whether err (or anything it wraps) is a condition no
// retry changes: a *PermanentError, or a Postgres error whose SQLSTATE
// says so. Everything else (a refused connection, a server restarting or
// shutting down, a failover) is transient.
func IsPermanent(err error) bool {
	var pe *PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && permanentCodes[pgErr.Code]
}

// IsUnreachable reports whether err is a server that could not be reached
// (refused, reset, unreachable, unresolvable, timed out) or is starting up:
// what waiting fixes, so a service waits for its source at start as it
// does once running.
func IsUnreachable(err error) bool {
	var dns *net.DNSError
	var nerr net.Error
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.As(err, &dns):
		return true
	case errors.As(err, &nerr) && nerr.Timeout():
		return true
	case errors.As(err, &pgErr):
		return pgErr.Code == "57P03" // cannot_connect_now: starting up or shutting down
	}
	return false
}
