# Sourced by the bench/proxy scripts: the upstream they proxy to, an nginx worker answering
# `return 200 'hello'` at 127.0.0.1:PORT, its files under DIR. Usage: start_upstream DIR PORT
# (appends its pid to PIDS, which the caller's cleanup kills).
start_upstream() {
  mkdir -p "$1/logs"
  cat > "$1/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $1; proxy_temp_path $1;
  fastcgi_temp_path $1; uwsgi_temp_path $1; scgi_temp_path $1;
  server { listen 127.0.0.1:$2; location / { return 200 'hello'; } } }
CONF
  nginx -p "$1" -c "$1/nginx.conf" & PIDS+=($!)
}
