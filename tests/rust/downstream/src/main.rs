//! A downstream binary: links kvpool, hashes with the C library and, given an instance and
//! a runtime directory, connects to that kvpoold. Prints "downstream ok".
fn main() {
    let (_, hashes) = kvpool::hash_tokens(&[1, 2, 3, 4], 4, 1337).expect("hash");
    assert_eq!(hashes, vec![14643705804678351452]);
    let args: Vec<String> = std::env::args().collect();
    if args.len() > 2 {
        let options = kvpool::ConnectOptions { runtime_dir: Some(args[2].clone()), ..Default::default() };
        let client = kvpool::Client::connect_with(&args[1], &options).expect("connect");
        let pool = client.pool("g").expect("pool g");
        let (_, seqs) = pool.hash_tokens(&[1, 2, 3, 4], 1337).expect("pool hash");
        assert_eq!(seqs, hashes);
    }
    println!("downstream ok");
}
