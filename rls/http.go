package rls

import (
	"errors"
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// DefaultMaxJSONBytes bounds a POST /json body.
const DefaultMaxJSONBytes = 1 << 20

// JSONHandler answers POST /json as envoyproxy/ratelimit does: the body is
// a RateLimitRequest in protobuf's JSON, the reply a RateLimitResponse,
// with status 200 when OK, 429 when over the limit, 400 for a request that
// does not parse or is invalid, 413 past maxBytes (0: DefaultMaxJSONBytes).
func (s *Server) JSONHandler(maxBytes int64) http.Handler {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxJSONBytes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, status.Convert(err).Message(), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
