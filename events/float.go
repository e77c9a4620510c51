package events

import (
	"math"
	"strconv"
)

// appendJSONFloat formats a float64 exactly as msgspec's JSON encoder does
// (msgspec ryu.h write_f64). Go's strconv finds the same shortest digits,
// but lays them out differently ("1e+16", "100" instead of "1e16", "100.0"),
// so only the digits are taken from strconv and the layout is msgspec's:
// with digit string D of n digits and value D×10^k, kk = n+k,
//
//	k >= 0 and kk <= 16: digits, zeros, ".0"   (1e15 -> 1000000000000000.0)
//	0 < kk <= 16:        XY.Z                  (3.14)
//	-5 < kk <= 0:        0.000XYZ              (0.00001)
//	otherwise:           X.YZe±N, no "+"       (1e16, 2.5e-8)
//
// NaN and ±Inf are written as null, as msgspec does.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(b, "-0.0"...)
		}
		return append(b, "0.0"...)
	}
	var tmp [32]byte
	// 'e' with -1 precision gives the shortest round-trip digits: d.ddde±XX.
	s := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	if s[0] == '-' {
		b = append(b, '-')
		s = s[1:]
	}
	epos := 0
	for i, c := range s {
		if c == 'e' {
			epos = i
			break
		}
	}
	mant, expPart := s[:epos], s[epos+1:]
	exp, _ := strconv.Atoi(string(expPart))
	digits := make([]byte, 0, 20)
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	n := len(digits)
	k := exp - (n - 1)
	kk := n + k
	switch {
	case k >= 0 && kk <= 16:
		b = append(b, digits...)
		for i := 0; i < k; i++ {
			b = append(b, '0')
		}
		return append(b, '.', '0')
	case 0 < kk && kk <= 16:
		b = append(b, digits[:kk]...)
		b = append(b, '.')
		return append(b, digits[kk:]...)
	case -5 < kk && kk <= 0:
		b = append(b, '0', '.')
		for i := 0; i < -kk; i++ {
			b = append(b, '0')
		}
		return append(b, digits...)
	default:
		b = append(b, digits[0])
		if n > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		return strconv.AppendInt(b, int64(kk-1), 10)
	}
}
