//go:build unix

package worker

import "os"

// handoffPipe returns the two ends of a pipe the network poller watches:
// wait blocks (parked in the poller) until a byte or more was written,
// and reads them; wake writes one; release closes both ends. All three are
// nil when the process cannot have one.
func handoffPipe() (wait, wake func() error, release func()) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil
	}
	buf := make([]byte, 64)
	one := []byte{1}
	return func() error {
			_, err := r.Read(buf)
			return err
		}, func() error {
			_, err := w.Write(one)
			return err
		}, func() {
			r.Close()
			w.Close()
		}
}
