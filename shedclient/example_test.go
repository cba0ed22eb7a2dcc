package shedclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedclient"
)

func ExampleClient_Transport() {
	sent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++
		fmt.Println("server sees priority", r.Header.Get("Loadshed-Priority"))
		w.Header().Set("RateLimit-Policy", `"per-key";q=100;w=60`)
		w.Header().Set("RateLimit", `"per-key";r=0;t=30`) // spent for 30s
	}))
	defer srv.Close()

	// The cooperating client, in one line.
	client := &http.Client{Transport: shedclient.New(shedclient.Config{NoWait: true}).Transport(nil)}

	ctx := shed.WithPriority(context.Background(), shed.Critical)
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := client.Do(req)
		var quota *shedclient.QuotaError
		switch {
		case errors.As(err, &quota):
			fmt.Printf("not sent: quota %q is spent for %v\n", quota.Policy, quota.RetryAfter.Round(time.Second))
		case err == nil:
			resp.Body.Close()
			fmt.Println(resp.Status)
		}
	}
	fmt.Println("requests sent:", sent)
	// Output:
	// server sees priority critical
	// 200 OK
	// not sent: quota "per-key" is spent for 30s
	// requests sent: 1
}
