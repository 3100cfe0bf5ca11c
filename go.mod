module github.com/modrun/modrun

go 1.22

require (
	github.com/go-gl/gl v0.0.0-20231021071112-07e5d0ea2e71
	github.com/go-gl/glfw/v3.3/glfw v0.0.0-20260823155953-d41da22a9587
	github.com/nlpodyssey/gopickle v0.2.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/image v0.18.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/text v0.16.0 // indirect
)
