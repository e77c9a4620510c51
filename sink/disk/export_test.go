package disk

// Crash lets go of s's writer lock as the kernel does when a process
// dies, for tests that simulate a crash by opening the root again without
// closing s (the lock file stays, as after a real crash).
func Crash(s *Sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writerLock != nil {
		s.writerLock.Close()
		s.writerLock = nil
	}
	if s.rootLock != nil {
		s.rootLock.Close()
		s.rootLock = nil
	}
}
