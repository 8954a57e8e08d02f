module github.com/braid-hpc/braid

go 1.26
