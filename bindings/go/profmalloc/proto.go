package profmalloc

// A reader and writer of pprof's profile.proto (the fields pprof uses),
// with the standard library alone: enough to merge the Go heap's profile
// with the C heap's and to take the difference of two snapshots.

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
)

type valueType struct{ Type, Unit string }

type label struct {
	Key, Str string
	Num      int64
	NumUnit  string
}

type sample struct {
	Locs   []*location
	Values []int64
	Labels []label
}

type mapping struct {
	ID, Start, Limit, Offset uint64
	File, BuildID            string
	HasFunctions             bool
	HasFilenames             bool
	HasLineNumbers           bool
	HasInlineFrames          bool
}

type line struct {
	Fn   *function
	Line int64
}

type location struct {
	ID       uint64
	Mapping  *mapping
	Address  uint64
	Lines    []line
	IsFolded bool
}

type function struct {
	ID                         uint64
	Name, SystemName, Filename string
	StartLine                  int64
}

type profile struct {
	SampleTypes       []valueType
	Samples           []*sample
	Mappings          []*mapping
	Locations         []*location
	Functions         []*function
	DropFrames        string
	KeepFrames        string
	TimeNanos         int64
	DurationNanos     int64
	PeriodType        valueType
	Period            int64
	Comments          []string
	DefaultSampleType string
}

var errProto = errors.New("profmalloc: malformed profile.proto")

// ---- decoding --------------------------------------------------------------

type field struct {
	num  int
	wire int
	v    uint64
	b    []byte
}

func varint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * uint(i))
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func fields(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		key, n := varint(b)
		if n == 0 {
			return errProto
		}
		b = b[n:]
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			if f.v, n = varint(b); n == 0 {
				return errProto
			}
			b = b[n:]
		case 1, 5:
			k := 8
			if f.wire == 5 {
				k = 4
			}
			if len(b) < k {
				return errProto
			}
			b = b[k:]
		case 2:
			l, n := varint(b)
			if n == 0 || l > uint64(len(b)-n) {
				return errProto
			}
			f.b = b[n : n+int(l)]
			b = b[n+int(l):]
		default:
			return errProto
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// ints appends a repeated integer field's values, packed or not.
func ints(f field, out []uint64) ([]uint64, error) {
	if f.wire == 0 {
		return append(out, f.v), nil
	}
	if f.wire != 2 {
		return out, errProto
	}
	for b := f.b; len(b) > 0; {
		v, n := varint(b)
		if n == 0 {
			return out, errProto
		}
		out = append(out, v)
		b = b[n:]
	}
	return out, nil
}

// parseProfile reads a profile, gzip'd or not.
// varints stores field n of message b (1 <= n <= len(out)) in out[n-1]
// and skips the others: the all-scalar messages of profile.proto.
func varints(b []byte, out []uint64) error {
	return fields(b, func(f field) error {
		if f.num >= 1 && f.num <= len(out) {
			out[f.num-1] = f.v
		}
		return nil
	})
}

func parseProfile(data []byte) (*profile, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		if data, err = io.ReadAll(z); err != nil {
			return nil, err
		}
	}
	var strs []string
	var types [][2]uint64
	var period [2]uint64
	var comments []uint64
	var drop, keep, def uint64
	type rawSample struct {
		locs, vals []uint64
		labels     [][4]uint64
	}
	var samples []rawSample
	type rawLoc struct {
		loc   *location
		mapID uint64
		lines [][2]uint64
	}
	var locs []rawLoc
	type rawFn struct {
		fn              *function
		name, sys, file uint64
	}
	var fns []rawFn
	var maps []*mapping
	var mapStr [][2]uint64
	p := &profile{}
	err := fields(data, func(f field) error {
		var err error
		switch f.num {
		case 1:
			var vt [2]uint64
			err = varints(f.b, vt[:])
			types = append(types, vt)
		case 2:
			var s rawSample
			err = fields(f.b, func(g field) error {
				var err error
				switch g.num {
				case 1:
					s.locs, err = ints(g, s.locs)
				case 2:
					s.vals, err = ints(g, s.vals)
				case 3:
					var l [4]uint64
					err = varints(g.b, l[:])
					s.labels = append(s.labels, l)
				}
				return err
			})
			samples = append(samples, s)
		case 3:
			var v [10]uint64
			err = varints(f.b, v[:])
			maps = append(maps, &mapping{ID: v[0], Start: v[1], Limit: v[2], Offset: v[3],
				HasFunctions: v[6] != 0, HasFilenames: v[7] != 0,
				HasLineNumbers: v[8] != 0, HasInlineFrames: v[9] != 0})
			mapStr = append(mapStr, [2]uint64{v[4], v[5]})
		case 4:
			l := rawLoc{loc: &location{}}
			err = fields(f.b, func(g field) error {
				var err error
				switch g.num {
				case 1:
					l.loc.ID = g.v
				case 2:
					l.mapID = g.v
				case 3:
					l.loc.Address = g.v
				case 4:
					var ln [2]uint64
					err = varints(g.b, ln[:])
					l.lines = append(l.lines, ln)
				case 5:
					l.loc.IsFolded = g.v != 0
				}
				return err
			})
			locs = append(locs, l)
		case 5:
			var v [5]uint64
			err = varints(f.b, v[:])
			fns = append(fns, rawFn{fn: &function{ID: v[0], StartLine: int64(v[4])},
				name: v[1], sys: v[2], file: v[3]})
		case 6:
			strs = append(strs, string(f.b))
		case 7:
			drop = f.v
		case 8:
			keep = f.v
		case 9:
			p.TimeNanos = int64(f.v)
		case 10:
			p.DurationNanos = int64(f.v)
		case 11:
			period = [2]uint64{} // the last period_type wins whole
			err = varints(f.b, period[:])
		case 12:
			p.Period = int64(f.v)
		case 13:
			comments, err = ints(f, comments)
		case 14:
			def = f.v
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	bad := false
	str := func(i uint64) string {
		if i >= uint64(len(strs)) {
			bad = true
			return ""
		}
		return strs[i]
	}
	for _, t := range types {
		p.SampleTypes = append(p.SampleTypes, valueType{str(t[0]), str(t[1])})
	}
	p.PeriodType = valueType{str(period[0]), str(period[1])}
	for _, c := range comments {
		p.Comments = append(p.Comments, str(c))
	}
	p.DropFrames, p.KeepFrames, p.DefaultSampleType = str(drop), str(keep), str(def)
	mapByID := map[uint64]*mapping{}
	for i, m := range maps {
		m.File, m.BuildID = str(mapStr[i][0]), str(mapStr[i][1])
		mapByID[m.ID] = m
		p.Mappings = append(p.Mappings, m)
	}
	fnByID := map[uint64]*function{}
	for _, f := range fns {
		f.fn.Name, f.fn.SystemName, f.fn.Filename = str(f.name), str(f.sys), str(f.file)
		fnByID[f.fn.ID] = f.fn
		p.Functions = append(p.Functions, f.fn)
	}
	locByID := map[uint64]*location{}
	for _, l := range locs {
		if l.mapID != 0 {
			if l.loc.Mapping = mapByID[l.mapID]; l.loc.Mapping == nil {
				return nil, errProto
			}
		}
		for _, ln := range l.lines {
			fn := fnByID[ln[0]]
			if fn == nil {
				return nil, errProto
			}
			l.loc.Lines = append(l.loc.Lines, line{fn, int64(ln[1])})
		}
		locByID[l.loc.ID] = l.loc
		p.Locations = append(p.Locations, l.loc)
	}
	for _, s := range samples {
		ps := &sample{}
		for _, id := range s.locs {
			l := locByID[id]
			if l == nil {
				return nil, errProto
			}
			ps.Locs = append(ps.Locs, l)
		}
		for _, v := range s.vals {
			ps.Values = append(ps.Values, int64(v))
		}
		for _, l := range s.labels {
			ps.Labels = append(ps.Labels, label{Key: str(l[0]), Str: str(l[1]), Num: int64(l[2]), NumUnit: str(l[3])})
		}
		if len(ps.Values) != len(p.SampleTypes) {
			return nil, errProto
		}
		p.Samples = append(p.Samples, ps)
	}
	if bad {
		return nil, errProto
	}
	return p, nil
}

// ---- encoding --------------------------------------------------------------

type encoder struct {
	strs map[string]uint64
	list []string
}

func (e *encoder) str(s string) uint64 {
	if i, ok := e.strs[s]; ok {
		return i
	}
	i := uint64(len(e.list))
	e.strs[s] = i
	e.list = append(e.list, s)
	return i
}

func putVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func putUint(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return putVarint(putVarint(b, uint64(num)<<3), v)
}

func putBool(b []byte, num int, v bool) []byte {
	if v {
		return putUint(b, num, 1)
	}
	return b
}

func putBytes(b []byte, num int, d []byte) []byte {
	b = putVarint(putVarint(b, uint64(num)<<3|2), uint64(len(d)))
	return append(b, d...)
}

func putPacked(b []byte, num int, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	var d []byte
	for _, v := range vs {
		d = putVarint(d, v)
	}
	return putBytes(b, num, d)
}

// marshal writes p gzip'd, with ids renumbered from 1.
func (p *profile) marshal(w io.Writer) error {
	e := &encoder{strs: map[string]uint64{}}
	e.str("")
	mapID := map[*mapping]uint64{}
	for i, m := range p.Mappings {
		mapID[m] = uint64(i + 1)
	}
	fnID := map[*function]uint64{}
	for i, f := range p.Functions {
		fnID[f] = uint64(i + 1)
	}
	locID := map[*location]uint64{}
	for i, l := range p.Locations {
		locID[l] = uint64(i + 1)
	}
	var out, sub []byte
	vt := func(num int, t valueType) {
		sub = putUint(putUint(sub[:0], 1, e.str(t.Type)), 2, e.str(t.Unit))
		out = putBytes(out, num, sub)
	}
	for _, t := range p.SampleTypes {
		vt(1, t)
	}
	for _, s := range p.Samples {
		ids := make([]uint64, len(s.Locs))
		for i, l := range s.Locs {
			ids[i] = locID[l]
		}
		vals := make([]uint64, len(s.Values))
		for i, v := range s.Values {
			vals[i] = uint64(v)
		}
		sub = putPacked(putPacked(sub[:0], 1, ids), 2, vals)
		for _, l := range s.Labels {
			var lb []byte
			lb = putUint(lb, 1, e.str(l.Key))
			lb = putUint(lb, 2, e.str(l.Str))
			lb = putUint(lb, 3, uint64(l.Num))
			lb = putUint(lb, 4, e.str(l.NumUnit))
			sub = putBytes(sub, 3, lb)
		}
		out = putBytes(out, 2, sub)
	}
	for _, m := range p.Mappings {
		sub = putUint(sub[:0], 1, mapID[m])
		sub = putUint(sub, 2, m.Start)
		sub = putUint(sub, 3, m.Limit)
		sub = putUint(sub, 4, m.Offset)
		sub = putUint(sub, 5, e.str(m.File))
		sub = putUint(sub, 6, e.str(m.BuildID))
		sub = putBool(sub, 7, m.HasFunctions)
		sub = putBool(sub, 8, m.HasFilenames)
		sub = putBool(sub, 9, m.HasLineNumbers)
		sub = putBool(sub, 10, m.HasInlineFrames)
		out = putBytes(out, 3, sub)
	}
	for _, l := range p.Locations {
		sub = putUint(sub[:0], 1, locID[l])
		if l.Mapping != nil {
			sub = putUint(sub, 2, mapID[l.Mapping])
		}
		sub = putUint(sub, 3, l.Address)
		for _, ln := range l.Lines {
			var lb []byte
			lb = putUint(lb, 1, fnID[ln.Fn])
			lb = putUint(lb, 2, uint64(ln.Line))
			sub = putBytes(sub, 4, lb)
		}
		sub = putBool(sub, 5, l.IsFolded)
		out = putBytes(out, 4, sub)
	}
	for _, f := range p.Functions {
		sub = putUint(sub[:0], 1, fnID[f])
		sub = putUint(sub, 2, e.str(f.Name))
		sub = putUint(sub, 3, e.str(f.SystemName))
		sub = putUint(sub, 4, e.str(f.Filename))
		sub = putUint(sub, 5, uint64(f.StartLine))
		out = putBytes(out, 5, sub)
	}
	var tail []byte
	tail = putUint(tail, 7, e.str(p.DropFrames))
	tail = putUint(tail, 8, e.str(p.KeepFrames))
	tail = putUint(tail, 9, uint64(p.TimeNanos))
	tail = putUint(tail, 10, uint64(p.DurationNanos))
	if p.PeriodType != (valueType{}) {
		sub = putUint(putUint(sub[:0], 1, e.str(p.PeriodType.Type)), 2, e.str(p.PeriodType.Unit))
		tail = putBytes(tail, 11, sub)
	}
	tail = putUint(tail, 12, uint64(p.Period))
	for _, c := range p.Comments {
		tail = putVarint(putVarint(tail, 13<<3), e.str(c))
	}
	tail = putUint(tail, 14, e.str(p.DefaultSampleType))
	for _, s := range e.list { // the table is complete once every string is interned
		out = putBytes(out, 6, []byte(s))
	}
	out = append(out, tail...)
	z := gzip.NewWriter(w)
	if _, err := z.Write(out); err != nil {
		return err
	}
	return z.Close()
}
