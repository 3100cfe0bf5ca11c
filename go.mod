module github.com/modrun/modrun

go 1.22

require (
	github.com/nlpodyssey/gopickle v0.2.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
