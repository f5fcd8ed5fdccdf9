// One-shot HTTP requests for bench/proxy/real_wire.sh: C clients, each in a loop opens a new TCP
// connection, sends `GET PATH` with `Connection: close`, reads the whole answer and closes, for
// SECS seconds. The latency counts the connect. Stdlib only.
// Usage: oneshot HOST:PORT PATH CLIENTS SECS → "n=.. errors=.. p50_us=.. p99_us=.. max_us=.."
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

func main() {
	addr, path := os.Args[1], os.Args[2]
	clients, _ := strconv.Atoi(os.Args[3])
	secs, _ := strconv.ParseFloat(os.Args[4], 64)
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n"
	var mu sync.Mutex
	var lat []float64
	errors := 0
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			bad := 0
			for time.Now().Before(end) {
				t0 := time.Now()
				conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
				if err != nil {
					bad++
					continue
				}
				conn.SetDeadline(time.Now().Add(30 * time.Second))
				_, err = io.WriteString(conn, req)
				if err == nil {
					var resp *http.Response
					resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							bad++
						}
					}
				}
				conn.Close()
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, float64(time.Since(t0).Microseconds()))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errors += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Float64s(lat)
	if len(lat) == 0 {
		fmt.Printf("n=0 errors=%d p50_us=0 p99_us=0 max_us=0\n", errors)
		return
	}
	p := func(q float64) float64 { return lat[int(q*float64(len(lat)-1))] }
	fmt.Printf("n=%d errors=%d p50_us=%.0f p99_us=%.0f max_us=%.0f\n", len(lat), errors, p(0.5), p(0.99),
		lat[len(lat)-1])
}
