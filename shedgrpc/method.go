package shedgrpc

import (
	"errors"

	"github.com/loadshed/loadshed/internal/grpcmethod"
	"github.com/loadshed/loadshed/shed"
)

// MethodPriorities annotates methods with priorities. A key is a full
// method name ("/payments.v1.Charges/Create"), or a pattern ending in "*"
// that covers every method it prefixes: "/payments.v1.Charges/*" a whole
// service, "/payments.v1.*" a whole package. An exact name wins over a
// pattern, a longer pattern over a shorter one. Methods no key covers get
// Config.DefaultPriority.
type MethodPriorities map[string]shed.Priority

// ParseMethodPriorities builds MethodPriorities from priority words, as a
// configuration file holds them. An unknown word or a malformed key is an
// error naming it.
func ParseMethodPriorities(words map[string]string) (MethodPriorities, error) {
	mp := make(MethodPriorities, len(words))
	for k, w := range words {
		p, err := shed.ParsePriority(w)
		if err != nil {
			return nil, errMethod(k, err.Error())
		}
		mp[k] = p
	}
	if _, err := compileMethods(mp, shed.Default); err != nil {
		return nil, err
	}
	return mp, nil
}

// compileMethods builds the table Interceptors resolve methods with.
func compileMethods(mp MethodPriorities, def shed.Priority) (grpcmethod.Table, error) {
	t, err := grpcmethod.Compile(mp, def)
	if ke := (*grpcmethod.KeyError)(nil); errors.As(err, &ke) {
		return t, errMethod(ke.Key, ke.Why)
	}
	return t, err
}
