// The Go setup of bench/proxy: a minimal httputil.ReverseProxy (the core of llama-swap's
// proxy), stdlib only. Usage: goproxy LISTEN UPSTREAM_URL
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	target, err := url.Parse(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	log.Fatal(http.ListenAndServe(os.Args[1], proxy))
}
