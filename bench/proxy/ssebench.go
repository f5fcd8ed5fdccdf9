// SSE latency for bench/proxy. `ssebench serve ADDR N GAP_US`: GET /sse streams N events, each
// carrying its send time (ns), GAP_US apart, flushed one by one; `ssebench read URL`: reads the
// stream and prints "events=N p50_us=.. p99_us=.. max_us=.. multi=K" where multi counts reads
// that carried more than one event (batching).
package main

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func serve(addr string, n int, gap time.Duration) {
	http.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Accel-Buffering", "no")
		f := w.(http.Flusher)
		next := time.Now()
		for i := 0; i < n; i++ {
			for time.Now().Before(next) {
			}
			next = next.Add(gap)
			fmt.Fprintf(w, "data: %d %d\n\n", i, time.Now().UnixNano())
			f.Flush()
		}
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) })
	log.Fatal(http.ListenAndServe(addr, nil))
}

func read(u string) {
	resp, err := http.Get(u)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var lat []float64
	multi := 0
	br := bufio.NewReaderSize(resp.Body, 1<<16)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		now := time.Now().UnixNano()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if br.Buffered() > 2 {
			multi++
		}
		f := strings.Fields(line[6:])
		ts, _ := strconv.ParseInt(f[1], 10, 64)
		lat = append(lat, float64(now-ts)/1000)
	}
	sort.Float64s(lat)
	if len(lat) == 0 {
		log.Fatal("no events")
	}
	p := func(q float64) float64 { return lat[int(q*float64(len(lat)-1))] }
	fmt.Printf("events=%d p50_us=%.0f p99_us=%.0f max_us=%.0f multi=%d\n", len(lat), p(0.5), p(0.99),
		lat[len(lat)-1], multi)
}

func main() {
	switch os.Args[1] {
	case "serve":
		n, _ := strconv.Atoi(os.Args[3])
		gap, _ := strconv.Atoi(os.Args[4])
		serve(os.Args[2], n, time.Duration(gap)*time.Microsecond)
	case "read":
		read(os.Args[2])
	}
}
